/*
 * Loads the library given as argument, calls its plugin_fn() 100 times
 * and unloads it, in a loop, so that the library comes and goes (mapped
 * about 10 ms, unmapped about 1 ms): for `rip-probe calls --uprobe
 * LIB:plugin_fn` attaching while it comes and goes. Prints `ready` after
 * the first round.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	for (int round = 0;; round++) {
		void *h = dlopen(argv[1], RTLD_NOW);
		if (!h) {
			fprintf(stderr, "%s\n", dlerror());
			return 1;
		}
		int (*f)(int) = (int (*)(int))dlsym(h, "plugin_fn");
		for (int i = 0; i < 100; i++)
			f(i);
		/*
		 * Mapped ten times longer than unmapped: it still goes away
		 * a hundred times a second (an attach can span it), and an
		 * attach that a loaded machine makes take a few milliseconds
		 * still finds it mapped on some try.
		 */
		usleep(10000);
		dlclose(h);
		if (round == 0) {
			printf("ready\n");
			fflush(stdout);
		}
		usleep(1000);
	}
}
