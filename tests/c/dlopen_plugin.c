/* A library that tests/c/dlopen_loop.c loads and unloads in a loop. */
__attribute__((noinline)) int plugin_fn(int x)
{
	return x + 1;
}
