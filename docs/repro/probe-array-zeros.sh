#!/bin/sh
# A uprobe event with an array fetch argument: ftrace prints the array, perf prints zeros.
# Minimal reproducer for docs/kernels.md ("Arrays of probe events print as zeros in perf").
# Needs root, gcc, binutils, perf and a kernel with uprobe events. Cleans up after itself.
set -eu
trap 'echo 0 > /sys/kernel/tracing/events/arrtest/emit/enable 2>/dev/null || true
      echo "-:arrtest/emit" >> /sys/kernel/tracing/uprobe_events 2>/dev/null || true' EXIT
cat > /tmp/arr.c <<'EOF'
__attribute__((noinline)) void emit(const void *rec) { __asm__ volatile("" :: "r"(rec) : "memory"); }
int main(void) {
    static const unsigned short idx[4] = {1, 2, 3, 4};
    for (int i = 0; i < 50; i++) emit(idx);
    return 0;
}
EOF
gcc -O2 -o /tmp/arr /tmp/arr.c
# The file offset of emit: its address, less its segment's address, plus the segment's offset.
sym=$(nm /tmp/arr | awk '$3 == "emit" {print $1}')
set -- $(readelf -lW /tmp/arr | awk '$1 == "LOAD" && / E / {print $2, $3; exit}')
off=$(printf '0x%x' $(( 0x$sym - $2 + $1 )))
echo "p:arrtest/emit /tmp/arr:$off idx=+0(%di):u16[4]" >> /sys/kernel/tracing/uprobe_events
grep 'field:u16' /sys/kernel/tracing/events/arrtest/emit/format   # field:u16 idx[]; ... size:8
perf record -q -e arrtest:emit -o /tmp/arr.data /tmp/arr && perf script -i /tmp/arr.data | head -1
#   ... idx={0,0,0,0}
echo 1 > /sys/kernel/tracing/events/arrtest/emit/enable; /tmp/arr; grep -m1 emit /sys/kernel/tracing/trace
#   ... idx={1,2,3,4}

