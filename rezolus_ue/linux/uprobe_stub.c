/* The uprobe transport's stub: what rezolus-ue's uprobe events probe.
 *
 * rezolus_ue_emit is REZOLUS_UE_SLOTS entries of REZOLUS_UE_SLOT_SIZE bytes, each a
 * `nop; nop; ret` that takes (const void *record, size_t len): slot i is the probed function
 * of one event, at rezolus_ue_emit + i * REZOLUS_UE_SLOT_SIZE. rezolus_ue_counters[i] is that
 * event's reference counter: the kernel keeps it non-zero in every process that maps this
 * file while any consumer has the event enabled (uprobe_events' REF_CTR_OFFSET), so a
 * caller reads it first and calls the slot only then. The counters live in .data, not
 * .bss: the kernel finds them by file offset, so they must be backed by the file.
 *
 * rezolus_ue_tap_<i> names slot i's second `nop`, where a BPF program's own uprobe can read
 * the record (bpftrace attaches only at symbols): the kernel refuses a second uprobe at the
 * first unless it names the same reference counter. A `nop`, which the kernel emulates: a
 * probed `ret` is single-stepped, which costs several times as much.
 *
 * Written in assembler so every slot's probed instructions are exactly one `nop` each, on
 * x86-64 and arm64 alike (both spell them `nop` and `ret`). Built and installed by
 * `python -m rezolus_ue.linux.uprobe_stub --install` (scripts/setup.sh runs it), which
 * passes REZOLUS_UE_SLOTS: the slot count is declared once, in uprobe_stub.py, where event
 * names are hashed into it.
 */
#ifndef REZOLUS_UE_SLOTS
#error "build with -DREZOLUS_UE_SLOTS=<n>: python -m rezolus_ue.linux.uprobe_stub --out PATH"
#endif
#define REZOLUS_UE_SLOT_SIZE 16
#define STR_(x) #x
#define STR(x) STR_(x)

__asm__(".text\n"
        ".globl rezolus_ue_emit\n"
        ".type rezolus_ue_emit, %function\n"
        ".p2align 4\n"
        "rezolus_ue_emit:\n"
        ".altmacro\n"
        ".macro rezolus_ue_slot i\n"
        ".p2align 4\n"
        "nop\n"
        ".globl rezolus_ue_tap_\\i\n"
        ".type rezolus_ue_tap_\\i, %function\n"
        "rezolus_ue_tap_\\i:\n"
        "nop\n"
        "ret\n"
        ".size rezolus_ue_tap_\\i, . - rezolus_ue_tap_\\i\n"
        ".endm\n"
        ".set .Lslot, 0\n"
        ".rept " STR(REZOLUS_UE_SLOTS) "\n"
        "rezolus_ue_slot %.Lslot\n"
        ".set .Lslot, .Lslot + 1\n"
        ".endr\n"
        ".noaltmacro\n"
        ".size rezolus_ue_emit, " STR(REZOLUS_UE_SLOTS) " * " STR(REZOLUS_UE_SLOT_SIZE) "\n");

__attribute__((visibility("default"))) const unsigned int rezolus_ue_slots = REZOLUS_UE_SLOTS;
__attribute__((visibility("default"))) const unsigned int rezolus_ue_slot_size =
    REZOLUS_UE_SLOT_SIZE;
__attribute__((visibility("default"), used, aligned(64), section(".data.rezolus_ue_counters")))
volatile unsigned short rezolus_ue_counters[REZOLUS_UE_SLOTS];
