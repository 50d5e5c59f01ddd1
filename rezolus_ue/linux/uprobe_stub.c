/* The uprobe transport's stub: what rezolus-ue's uprobe events probe.
 *
 * rezolus_ue_emit is REZOLUS_UE_SLOTS entries of REZOLUS_UE_SLOT_SIZE bytes, each a `nop;
 * ret` that takes (const void *record, size_t len): slot i is the probed function of one
 * event, at rezolus_ue_emit + i * REZOLUS_UE_SLOT_SIZE. rezolus_ue_counters[i] is that
 * event's reference counter: the kernel keeps it non-zero in every process that maps this
 * file while any consumer has the event enabled (uprobe_events' REF_CTR_OFFSET), so a
 * caller reads it first and calls the slot only then. The counters live in .data, not
 * .bss: the kernel finds them by file offset, so they must be backed by the file.
 *
 * Written in assembler so every slot is exactly one instruction to probe, on x86-64 and
 * arm64 alike (both spell them `nop` and `ret`). Built and installed by
 * `python -m rezolus_ue.linux.uprobe_stub --install` (scripts/setup.sh runs it).
 */
#define REZOLUS_UE_SLOTS 256
#define REZOLUS_UE_SLOT_SIZE 16
#define STR_(x) #x
#define STR(x) STR_(x)

__asm__(".text\n"
        ".globl rezolus_ue_emit\n"
        ".type rezolus_ue_emit, %function\n"
        ".p2align 4\n"
        "rezolus_ue_emit:\n"
        ".rept " STR(REZOLUS_UE_SLOTS) "\n"
        ".p2align 4\n"
        "nop\n"
        "ret\n"
        ".endr\n"
        ".size rezolus_ue_emit, " STR(REZOLUS_UE_SLOTS) " * " STR(REZOLUS_UE_SLOT_SIZE) "\n");

__attribute__((visibility("default"))) const unsigned int rezolus_ue_slots = REZOLUS_UE_SLOTS;
__attribute__((visibility("default"))) const unsigned int rezolus_ue_slot_size =
    REZOLUS_UE_SLOT_SIZE;
__attribute__((visibility("default"), used, aligned(64), section(".data.rezolus_ue_counters")))
volatile unsigned short rezolus_ue_counters[REZOLUS_UE_SLOTS];
