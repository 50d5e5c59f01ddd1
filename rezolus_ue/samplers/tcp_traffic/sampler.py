"""The tcp_traffic sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

from ...bpf.loader import BpfObject, Features
from ...errors import KernelFeatureMissing, SamplerUnavailable
from ..base import Rows
from ..bpf_sampler import BpfCapture, BpfSampler
from . import FAMILIES, TCP_TRAFFIC

#: Why the sampler cannot run on a kernel without either function hook.
NO_FUNCTION_HOOKS = (
    "needs kprobes (CONFIG_KPROBES) or fentry (BPF trampolines: CONFIG_FUNCTION_TRACER,"
    " CONFIG_DYNAMIC_FTRACE, and a readable available_filter_functions) to hook"
    " tcp_sendmsg and tcp_cleanup_rbuf, and this kernel has neither; TCP latency, srtt,"
    " connect latency and retransmits need only tracepoints (sampler tcp)")


def missing_hooks(features: Features, attach: str = "auto") -> str | None:
    """Return why the function hooks cannot attach here (None: some kind can)."""
    fentry, kprobe = features.trampolines(), features.kprobes()
    if attach == "fentry" and not fentry:
        return "attach = \"fentry\": this kernel cannot attach fentry (no BPF trampolines:" \
               " dynamic ftrace missing or its function list unreadable)"
    if attach == "kprobe" and not kprobe:
        return "attach = \"kprobe\": this kernel has no kprobes (CONFIG_KPROBES)"
    if not (fentry or kprobe):
        return NO_FUNCTION_HOOKS
    return None


class TcpTraffic(BpfSampler):
    """TCP bytes and calls by direction (BPF on tcp_sendmsg, tcp_cleanup_rbuf)."""

    name = "tcp_traffic"
    families = FAMILIES
    per_cpu_maps = ("counters",)
    reads = ((TCP_TRAFFIC, "counters"),)

    def start(self) -> None:
        why = missing_hooks(Features(), self.str_option("attach"))
        if why is not None:
            raise SamplerUnavailable(self.name, why)
        try:
            super().start()
        except KernelFeatureMissing as e:  # e.g. a function renamed or inlined
            raise SamplerUnavailable(self.name, str(e)) from e

    def setup(self, bpf: BpfObject) -> None:
        self._counters = bpf.array("counters")

    def parse(self, raw: BpfCapture) -> Rows:
        c = raw.maps.get("counters")
        if c is None:
            return {}
        return {TCP_TRAFFIC: {(): tuple(int(c[f].sum()) for f in c.dtype.names or ())}}

    def close(self) -> None:
        self._counters = None  # type: ignore[assignment]
        super().close()
