"""BPF support: the libbpf ctypes binding (``libbpf``), the loader that picks attach
variants by probing the kernel (``loader``) and the object build (``build``)."""
