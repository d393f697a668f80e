/*
 * The allocation sampler's stack walk (unwind.c) and the CFI interpreter
 * it takes its rules from (cfi.c): internal to librip's C half.
 */
#ifndef RIP_UNWIND_H
#define RIP_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* What stepping over one frame on x86-64 needs, from the DWARF CFI at an
 * address: the CFA is rsp or rbp plus cfa_off; the return address is at
 * CFA - 8 (addresses whose return address is elsewhere have no rule);
 * the caller's rbp is saved at CFA + bp_off, or unchanged, or undefined. */
struct rip_cfi_rule {
    int32_t cfa_off;
    int16_t bp_off;
    uint8_t flags;
};

/* Flags of a rule: the CFA is rbp-based; rbp is saved at CFA + bp_off;
 * rbp is undefined in the caller; there is no caller (the return address
 * is undefined: the stack ends here). */
#define RIP_CFI_CFA_RBP 1u
#define RIP_CFI_BP_SAVED 2u
#define RIP_CFI_BP_UNDEFINED 4u
#define RIP_CFI_END 8u

/* libgcc's FDE search, exported since GCC 3.0 but declared in no header:
 * the FDE of the code at `pc` (null: none), and the bases its pointers are
 * relative to (`func`: the start of the function). */
struct dwarf_eh_bases {
    void *tbase;
    void *dbase;
    void *func;
};
const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

/* The rule of the code at `pc` (an instruction's address: a return
 * address minus one) from its FDE, found by libgcc's _Unwind_Find_FDE:
 * 1 found, 0 the CFI says something a rule cannot (a CFA expression, a
 * signal frame, rbp or the return address in a register; the caller then
 * walks with libgcc), -1 no FDE (the end of what CFI can walk, as for
 * libgcc). Reads only the loaded modules' .eh_frame; never allocates. */
int rip_cfi_rule(uint64_t pc, struct rip_cfi_rule *rule);

/* The same from an FDE record (`fde_size` bytes at most) and its CIE
 * record (`cie_size` at most), of a function starting at `func`: any
 * bytes, every read inside those bounds. */
int rip_cfi_rule_in(const uint8_t *fde, size_t fde_size, const uint8_t *cie, size_t cie_size,
                    uint64_t func, uint64_t pc, struct rip_cfi_rule *rule);

#endif
