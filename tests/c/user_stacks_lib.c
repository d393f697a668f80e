/*
 * The shared library of user_stacks.c: two frames between the
 * executable's call chain and its blocking function, so an unwinder must
 * cross from the executable into a library and back. Built like the
 * executable: -O2 -fomit-frame-pointer, then stripped (its functions stay
 * in .dynsym, its CFI in .eh_frame).
 *
 * noipa: no clones (`.isra`, `.constprop`) that would rename a frame. The
 * asm barriers and the arithmetic on the callees' results keep the calls
 * from being tail calls, which would leave no frame.
 */
__attribute__((noinline, noipa)) int stk_lib_inner(int (*cb)(int), int x)
{
	int r = cb(x);
	__asm__ volatile("" ::: "memory");
	return r * 3 + x;
}

__attribute__((noinline, noipa)) int stk_lib_outer(int (*cb)(int), int x)
{
	int r = stk_lib_inner(cb, x + 1);
	__asm__ volatile("" ::: "memory");
	return r + 7;
}
