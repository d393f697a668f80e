/*
 * The DWARF call-frame information of x86-64 code, as much of it as
 * stepping over a frame by its CFA, return address and rbp needs
 * (unwind.h). The FDE is found by libgcc's own _Unwind_Find_FDE, and its
 * CIE's and its own programs are run up to the address, as libgcc's
 * unwinder does; anything beyond the rule (expressions, registers saved
 * in registers, signal frames, vendor opcodes) is said to be unsupported,
 * never guessed.
 *
 * The .eh_frame of a loaded module is this process's own read-only
 * memory, which libgcc's unwinder reads the same way. Every read still
 * stays inside the two records' lengths (rip_cfi_rule_in takes them as
 * bounds, so that any bytes can be given to it: the fuzz target `cfi`).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

#include "unwind.h"

#if defined(__x86_64__)

/* DWARF register numbers on x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

/* How a frame's caller's rbp and return address are found. */
enum how { SAME, AT_CFA, UNDEFINED, UNSUPPORTED };

struct reg_rule {
    enum how how;
    int64_t off; /* AT_CFA: bytes from the CFA */
};

struct row {
    int cfa_reg; /* REG_RSP or REG_RBP; anything else is unsupported */
    int cfa_expr;
    int64_t cfa_off;
    struct reg_rule bp, ra;
};

static uint64_t uleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end)
{
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64)
            v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    if (shift < 64 && (b & 0x40))
        v |= -(int64_t)((uint64_t)1 << shift);
    return v;
}

/* Bytes of a pointer in encoding `enc` (DW_EH_PE_*), or -1 when variable
 * or unknown. */
static int enc_size(uint8_t enc)
{
    switch (enc & 0x0f) {
    case 0x00: /* absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        return 8;
    case 0x02: /* udata2 */
    case 0x0a: /* sdata2 */
        return 2;
    case 0x03: /* udata4 */
    case 0x0b: /* sdata4 */
        return 4;
    default:
        return -1;
    }
}

static uint32_t load32(const uint8_t *p)
{
    uint32_t v;
    __builtin_memcpy(&v, p, 4);
    return v;
}

static uint16_t load16(const uint8_t *p)
{
    uint16_t v;
    __builtin_memcpy(&v, p, 2);
    return v;
}

/* A CIE's fields the FDE's program needs. */
struct cie {
    const uint8_t *insns, *end;
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int has_aug_data;
};

/* Skips `n` bytes of [*p, end): 0 when they are not there. */
static int skip(const uint8_t **p, const uint8_t *end, uint64_t n)
{
    if (n > (uint64_t)(end - *p))
        return 0;
    *p += n;
    return 1;
}

/* The CIE record at `p`, of at most `size` bytes. */
static int parse_cie(const uint8_t *p, size_t size, struct cie *c)
{
    if (size < 9)
        return 0;
    uint32_t len = load32(p);
    /* 0xffffffff: a 64-bit length follows (never in .eh_frame). */
    if (len < 5 || len == 0xffffffffu || len > size - 4)
        return 0;
    const uint8_t *end = p + 4 + len;
    p += 4;
    if (load32(p) != 0)
        return 0;
    p += 4;
    uint8_t version = *p++;
    if (version != 1 && version != 3)
        return 0;
    const char *aug = (const char *)p;
    while (p < end && *p)
        p++;
    if (p >= end)
        return 0;
    p++;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    if (version == 1) {
        if (p >= end)
            return 0;
        c->ra_reg = *p++;
    } else {
        c->ra_reg = uleb(&p, end);
    }
    c->fde_enc = 0; /* absptr */
    c->has_aug_data = aug[0] == 'z';
    if (c->has_aug_data) {
        uint64_t n = uleb(&p, end);
        const uint8_t *data = p;
        if (!skip(&p, end, n))
            return 0;
        const uint8_t *data_end = p;
        for (const char *a = aug + 1; *a; a++) {
            if (data >= data_end)
                return 0;
            if (*a == 'R') {
                c->fde_enc = *data++;
            } else if (*a == 'L') {
                data++;
            } else if (*a == 'P') {
                int n = enc_size(*data++);
                if (n < 0 || !skip(&data, data_end, (uint64_t)n))
                    return 0;
            } else {
                /* 'S' (a signal frame) and anything unknown. */
                return 0;
            }
        }
    } else if (aug[0] != 0) {
        return 0;
    }
    c->insns = p;
    c->end = end;
    return 1;
}

static void set_reg(struct row *r, uint64_t reg, enum how how, int64_t off)
{
    struct reg_rule rule = {how, off};
    if (reg == REG_RBP)
        r->bp = rule;
    else if (reg == REG_RA)
        r->ra = rule;
}

/* Runs a CFA program until the location passes `target`; 0 on anything
 * this walk does not model. `init` is the CIE's row (for restore). */
static int run(const uint8_t *p, const uint8_t *end, const struct cie *c, uint64_t loc,
               uint64_t target, struct row *r, const struct row *init)
{
    struct row saved[8];
    unsigned depth = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, delta;
        switch (op & 0xc0) {
        case 0x40: /* advance_loc */
            loc += (uint64_t)(op & 0x3f) * c->code_align;
            if (loc > target)
                return 1;
            continue;
        case 0x80: /* offset */
            set_reg(r, op & 0x3f, AT_CFA, (int64_t)uleb(&p, end) * c->data_align);
            continue;
        case 0xc0: /* restore */
            reg = op & 0x3f;
            if (reg == REG_RBP)
                r->bp = init->bp;
            else if (reg == REG_RA)
                r->ra = init->ra;
            continue;
        }
        switch (op) {
        case 0x00: /* nop */
            break;
        case 0x02: /* advance_loc1 */
        case 0x03: /* advance_loc2 */
        case 0x04: /* advance_loc4 */
            if (p + (op == 0x02 ? 1 : op == 0x03 ? 2 : 4) > end)
                return 0;
            delta = op == 0x02 ? *p : op == 0x03 ? load16(p) : load32(p);
            p += op == 0x02 ? 1 : op == 0x03 ? 2 : 4;
            loc += delta * c->code_align;
            if (loc > target)
                return 1;
            break;
        case 0x05: /* offset_extended */
            reg = uleb(&p, end);
            set_reg(r, reg, AT_CFA, (int64_t)uleb(&p, end) * c->data_align);
            break;
        case 0x06: /* restore_extended */
            reg = uleb(&p, end);
            if (reg == REG_RBP)
                r->bp = init->bp;
            else if (reg == REG_RA)
                r->ra = init->ra;
            break;
        case 0x07: /* undefined */
            set_reg(r, uleb(&p, end), UNDEFINED, 0);
            break;
        case 0x08: /* same_value */
            set_reg(r, uleb(&p, end), SAME, 0);
            break;
        case 0x09: /* register */
            reg = uleb(&p, end);
            uleb(&p, end);
            set_reg(r, reg, UNSUPPORTED, 0);
            break;
        case 0x0a: /* remember_state */
            if (depth == sizeof saved / sizeof saved[0])
                return 0;
            saved[depth++] = *r;
            break;
        case 0x0b: /* restore_state */
            if (depth == 0)
                return 0;
            *r = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            r->cfa_reg = (int)uleb(&p, end);
            r->cfa_off = (int64_t)uleb(&p, end);
            r->cfa_expr = 0;
            break;
        case 0x0d: /* def_cfa_register */
            r->cfa_reg = (int)uleb(&p, end);
            r->cfa_expr = 0;
            break;
        case 0x0e: /* def_cfa_offset */
            r->cfa_off = (int64_t)uleb(&p, end);
            break;
        case 0x0f: /* def_cfa_expression */
            r->cfa_expr = 1;
            if (!skip(&p, end, uleb(&p, end)))
                return 0;
            break;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p, end);
            if (!skip(&p, end, uleb(&p, end)))
                return 0;
            set_reg(r, reg, UNSUPPORTED, 0);
            break;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p, end);
            set_reg(r, reg, AT_CFA, sleb(&p, end) * c->data_align);
            break;
        case 0x12: /* def_cfa_sf */
            r->cfa_reg = (int)uleb(&p, end);
            r->cfa_off = sleb(&p, end) * c->data_align;
            r->cfa_expr = 0;
            break;
        case 0x13: /* def_cfa_offset_sf */
            r->cfa_off = sleb(&p, end) * c->data_align;
            break;
        case 0x14: /* val_offset */
            reg = uleb(&p, end);
            uleb(&p, end);
            set_reg(r, reg, UNSUPPORTED, 0);
            break;
        case 0x15: /* val_offset_sf */
            reg = uleb(&p, end);
            sleb(&p, end);
            set_reg(r, reg, UNSUPPORTED, 0);
            break;
        case 0x2e: /* GNU_args_size */
            uleb(&p, end);
            break;
        case 0x2f: /* GNU_negative_offset_extended */
            reg = uleb(&p, end);
            set_reg(r, reg, AT_CFA, -(int64_t)uleb(&p, end) * c->data_align);
            break;
        default: /* set_loc, vendor extensions */
            return 0;
        }
    }
    return 1;
}

int rip_cfi_rule(uint64_t pc, struct rip_cfi_rule *rule)
{
    struct dwarf_eh_bases bases;
    const uint8_t *fde = _Unwind_Find_FDE((void *)(uintptr_t)pc, &bases);
    if (fde == 0)
        return -1;
    /* The records' own lengths bound the reads, as libgcc trusts them. */
    const uint8_t *cie = fde + 4 - load32(fde + 4);
    return rip_cfi_rule_in(fde, 4 + (size_t)load32(fde), cie, 4 + (size_t)load32(cie),
                           (uint64_t)(uintptr_t)bases.func, pc, rule);
}

int rip_cfi_rule_in(const uint8_t *fde, size_t fde_size, const uint8_t *cie, size_t cie_size,
                    uint64_t func, uint64_t pc, struct rip_cfi_rule *rule)
{
    if (fde_size < 8)
        return 0;
    uint32_t len = load32(fde);
    if (len < 4 || len == 0xffffffffu || len > fde_size - 4)
        return 0;
    const uint8_t *end = fde + 4 + len;
    struct cie c;
    if (!parse_cie(cie, cie_size, &c) || c.ra_reg != REG_RA)
        return 0;
    int size = enc_size(c.fde_enc);
    const uint8_t *p = fde + 8;
    if (size < 0 || !skip(&p, end, 2 * (uint64_t)size))
        return 0;
    if (c.has_aug_data && !skip(&p, end, uleb(&p, end)))
        return 0;

    struct row init = {.cfa_reg = REG_RSP, .bp = {SAME, 0}, .ra = {UNDEFINED, 0}};
    if (!run(c.insns, c.end, &c, 0, UINT64_MAX, &init, &init))
        return 0;
    struct row r = init;
    if (!run(p, end, &c, func, pc, &r, &init))
        return 0;

    if (r.cfa_expr || (r.cfa_reg != REG_RSP && r.cfa_reg != REG_RBP))
        return 0;
    if (r.bp.how == UNSUPPORTED || r.ra.how == UNSUPPORTED)
        return 0;
    if (r.cfa_off <= 0 || r.cfa_off > INT32_MAX || r.bp.off < INT16_MIN || r.bp.off > INT16_MAX)
        return 0;
    rule->cfa_off = (int32_t)r.cfa_off;
    rule->bp_off = (int16_t)r.bp.off;
    rule->flags = (r.cfa_reg == REG_RBP ? RIP_CFI_CFA_RBP : 0) |
                  (r.bp.how == AT_CFA ? RIP_CFI_BP_SAVED : 0) |
                  (r.bp.how == UNDEFINED ? RIP_CFI_BP_UNDEFINED : 0);
    if (r.ra.how == UNDEFINED)
        rule->flags |= RIP_CFI_END;
    else if (r.ra.how != AT_CFA || r.ra.off != -8)
        return 0;
    return 1;
}

#else

int rip_cfi_rule(uint64_t pc, struct rip_cfi_rule *rule)
{
    (void)pc;
    (void)rule;
    return 0;
}

int rip_cfi_rule_in(const uint8_t *fde, size_t fde_size, const uint8_t *cie, size_t cie_size,
                    uint64_t func, uint64_t pc, struct rip_cfi_rule *rule)
{
    (void)fde, (void)fde_size, (void)cie, (void)cie_size, (void)func, (void)pc, (void)rule;
    return 0;
}

#endif
