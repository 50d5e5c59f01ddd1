"""The syscall-number -> family table for x86_64 and arm64: which group each syscall's
count and latency go to. Pure data and lookups; the sampler writes ``lookup_table()``
into the BPF object's ``.rodata`` before load, so the C code holds no table of its own.

Families are Rezolus's (its ``syscall_lut``): the same names and the same members, plus
the newer or ``*at`` variants of calls Rezolus lists (``openat2``, ``renameat2``,
``unlinkat``, ``newfstatat``, ``clone3``, ``futex_wait``, ...), so that arm64, whose
table has only the ``*at`` forms, puts the same operations in the same family as x86_64.
Every other syscall, and every number not in the table, is ``other``.

Number -> name tables, as of Linux 6.18:

- x86_64: ``arch/x86/entry/syscalls/syscall_64.tbl``, ABIs ``common`` and ``64`` (the
  x32 entries 512-547 are reached only with ``__X32_SYSCALL_BIT`` set: out of range).
- arm64: ``scripts/syscall.tbl`` (the asm-generic numbers of
  ``include/uapi/asm-generic/unistd.h``), ABIs ``common``, ``64``, ``renameat``,
  ``rlimit`` and ``memfd_secret`` (``arch/arm64/kernel/Makefile.syscalls``).

Both are written below as lines ``<number of the first name> <name> <name> ...`` of
consecutive numbers. Syscalls of 32-bit (compat) processes arrive with their own
numbering and are classified by the 64-bit table (Rezolus does the same).
"""

from __future__ import annotations

import numpy as np

#: Family names; the index is the code the BPF program counts by. 0 is ``other``, so a
#: zeroed table (or a number past its end) classifies as other.
FAMILIES = ("other", "read", "write", "poll", "lock", "time", "sleep", "socket", "yield",
            "filesystem", "memory", "process", "query", "ipc", "timer", "event")
OTHER = 0
#: Numbers the table covers (SYSCALL_MAX_ID in bpf/syscall.h); larger ones are other.
MAX_SYSCALL_ID = 1024

#: The members of each family but other.
GROUPS: dict[str, tuple[str, ...]] = {
    "read": ("read", "readv", "pread64", "preadv", "preadv2", "recvfrom", "recvmsg",
             "recvmmsg"),
    "write": ("write", "writev", "pwrite64", "pwritev", "pwritev2", "sendto", "sendmsg",
              "sendmmsg"),
    "poll": ("poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
             "epoll_ctl", "epoll_ctl_old", "epoll_wait", "epoll_wait_old", "epoll_pwait",
             "epoll_pwait2"),
    "lock": ("futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue"),
    "time": ("adjtimex", "clock_adjtime", "clock_getres", "clock_gettime", "clock_settime",
             "gettimeofday", "settimeofday", "time"),
    "sleep": ("nanosleep", "clock_nanosleep"),
    "socket": ("socket", "socketpair", "bind", "listen", "accept", "accept4", "connect",
               "getsockname", "getpeername", "getsockopt", "setsockopt", "shutdown"),
    "yield": ("sched_yield",),
    "filesystem": (
        "open", "openat", "openat2", "creat", "close", "close_range", "lseek", "fsync",
        "fdatasync", "sync", "syncfs", "truncate", "ftruncate", "rename", "renameat",
        "renameat2", "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat",
        "readlink", "readlinkat", "stat", "fstat", "lstat", "newfstatat", "statx", "access",
        "faccessat", "faccessat2", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
        "fchown", "lchown", "fchownat", "utime", "utimes", "futimesat", "utimensat", "mkdir",
        "mkdirat", "rmdir", "chdir", "fchdir", "getcwd", "getdents", "getdents64"),
    "memory": ("mmap", "munmap", "mprotect", "pkey_mprotect", "mremap", "madvise", "msync",
               "mincore", "mlock", "mlock2", "munlock", "mlockall", "munlockall", "brk"),
    "process": ("clone", "clone3", "fork", "vfork", "execve", "execveat", "exit",
                "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill", "ptrace", "prctl",
                "setpgid", "getpgid", "setpriority", "getpriority", "sched_setaffinity",
                "sched_getaffinity", "sched_setscheduler", "sched_getscheduler",
                "sched_setparam", "sched_getparam"),
    "query": ("getrusage", "getrlimit", "setrlimit", "prlimit64", "times", "getpid",
              "getppid", "getuid", "geteuid", "getgid", "getegid", "gettid", "uname",
              "sysinfo", "getcpu"),
    "ipc": ("pipe", "pipe2", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
            "semtimedop", "semctl", "shmget", "shmat", "shmdt", "shmctl", "mq_open",
            "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr"),
    "timer": ("alarm", "getitimer", "setitimer", "timer_create", "timer_delete",
              "timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create",
              "timerfd_gettime", "timerfd_settime"),
    "event": ("eventfd", "eventfd2", "signalfd", "signalfd4", "inotify_init", "inotify_init1",
              "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark",
              "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents",
              "io_pgetevents", "io_uring_setup", "io_uring_enter", "io_uring_register"),
}

#: Syscall name -> family name (names in no group are other).
FAMILY_OF: dict[str, str] = {n: fam for fam, names in GROUPS.items() for n in names}

_X86_64 = """
0 read write open close stat fstat lstat poll lseek mmap mprotect munmap brk
13 rt_sigaction rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access
22 pipe select sched_yield mremap msync mincore madvise shmget shmat shmctl dup dup2
34 pause nanosleep getitimer alarm setitimer getpid sendfile socket connect accept
44 sendto recvfrom sendmsg recvmsg shutdown bind listen getsockname getpeername
53 socketpair setsockopt getsockopt clone fork vfork execve exit wait4 kill uname semget
65 semop semctl shmdt msgget msgsnd msgrcv msgctl fcntl flock fsync fdatasync truncate
77 ftruncate getdents getcwd chdir fchdir rename mkdir rmdir creat link unlink symlink
89 readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage
99 sysinfo times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid
110 getppid getpgrp setsid setreuid setregid getgroups setgroups setresuid getresuid
119 setresgid getresgid getpgid setfsuid setfsgid getsid capget capset rt_sigpending
128 rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib
135 personality ustat statfs fstatfs sysfs getpriority setpriority sched_setparam
143 sched_getparam sched_setscheduler sched_getscheduler sched_get_priority_max
147 sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall
153 vhangup modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot
162 sync acct settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname
172 iopl ioperm create_module init_module delete_module get_kernel_syms query_module
179 quotactl nfsservctl getpmsg putpmsg afs_syscall tuxcall security gettid readahead
188 setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr
196 flistxattr removexattr lremovexattr fremovexattr tkill time futex sched_setaffinity
204 sched_getaffinity set_thread_area io_setup io_destroy io_getevents io_submit
210 io_cancel get_thread_area lookup_dcookie epoll_create epoll_ctl_old epoll_wait_old
216 remap_file_pages getdents64 set_tid_address restart_syscall semtimedop fadvise64
222 timer_create timer_settime timer_gettime timer_getoverrun timer_delete clock_settime
228 clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl tgkill
235 utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend
243 mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl
251 ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages
257 openat mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat
266 symlinkat readlinkat fchmodat faccessat pselect6 ppoll unshare set_robust_list
274 get_robust_list splice tee sync_file_range vmsplice move_pages utimensat epoll_pwait
282 signalfd timerfd_create eventfd fallocate timerfd_settime timerfd_gettime accept4
289 signalfd4 eventfd2 epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev
297 rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init fanotify_mark prlimit64
303 name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg setns getcpu
310 process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr
316 renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat userfaultfd
324 membarrier mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc
331 pkey_free statx io_pgetevents rseq uretprobe uprobe
424 pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree
429 move_mount fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2
438 pidfd_getfd faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd
444 landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret
448 process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2
453 map_shadow_stack futex_wake futex_wait futex_requeue statmount listmount
459 lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal setxattrat getxattrat
465 listxattrat removexattrat open_tree_attr file_getattr file_setattr
"""

_ARM64 = """
0 io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr
8 getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr
16 fremovexattr getcwd lookup_dcookie eventfd2 epoll_create1 epoll_ctl epoll_pwait dup
24 dup3 fcntl inotify_init1 inotify_add_watch inotify_rm_watch ioctl ioprio_set
31 ioprio_get flock mknodat mkdirat unlinkat symlinkat linkat renameat umount2 mount
41 pivot_root nfsservctl statfs fstatfs truncate ftruncate fallocate faccessat chdir
50 fchdir chroot fchmod fchmodat fchownat fchown openat close vhangup pipe2 quotactl
61 getdents64 lseek read write readv writev pread64 pwrite64 preadv pwritev sendfile
72 pselect6 ppoll signalfd4 vmsplice splice tee readlinkat newfstatat fstat sync fsync
83 fdatasync sync_file_range timerfd_create timerfd_settime timerfd_gettime utimensat
89 acct capget capset personality exit exit_group waitid set_tid_address unshare futex
99 set_robust_list get_robust_list nanosleep getitimer setitimer kexec_load init_module
106 delete_module timer_create timer_gettime timer_getoverrun timer_settime timer_delete
112 clock_settime clock_gettime clock_getres clock_nanosleep syslog ptrace
118 sched_setparam sched_setscheduler sched_getscheduler sched_getparam
122 sched_setaffinity sched_getaffinity sched_yield sched_get_priority_max
126 sched_get_priority_min sched_rr_get_interval restart_syscall kill tkill tgkill
132 sigaltstack rt_sigsuspend rt_sigaction rt_sigprocmask rt_sigpending rt_sigtimedwait
138 rt_sigqueueinfo rt_sigreturn setpriority getpriority reboot setregid setgid setreuid
146 setuid setresuid getresuid setresgid getresgid setfsuid setfsgid times setpgid
155 getpgid getsid setsid getgroups setgroups uname sethostname setdomainname getrlimit
164 setrlimit getrusage umask prctl getcpu gettimeofday settimeofday adjtimex getpid
173 getppid getuid geteuid getgid getegid gettid sysinfo mq_open mq_unlink mq_timedsend
183 mq_timedreceive mq_notify mq_getsetattr msgget msgctl msgrcv msgsnd semget semctl
192 semtimedop semop shmget shmctl shmat shmdt socket socketpair bind listen accept
203 connect getsockname getpeername sendto recvfrom setsockopt getsockopt shutdown
211 sendmsg recvmsg readahead brk munmap mremap add_key request_key keyctl clone execve
222 mmap fadvise64 swapon swapoff mprotect msync mlock munlock mlockall munlockall
232 mincore madvise remap_file_pages mbind get_mempolicy set_mempolicy migrate_pages
239 move_pages rt_tgsigqueueinfo perf_event_open accept4 recvmmsg
260 wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at open_by_handle_at
266 clock_adjtime syncfs setns sendmmsg process_vm_readv process_vm_writev kcmp
273 finit_module sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create
280 bpf execveat userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2
288 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq kexec_file_load
424 pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree
429 move_mount fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2
438 pidfd_getfd faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd
444 landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret
448 process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2
453 map_shadow_stack futex_wake futex_wait futex_requeue statmount listmount
459 lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal setxattrat getxattrat
465 listxattrat removexattrat open_tree_attr file_getattr file_setattr
"""


def _parse(text: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in text.split("\n"):
        if line:
            first, *names = line.split()
            out.update(enumerate(names, int(first)))
    return out


#: Architecture -> {syscall number: name}.
SYSCALLS: dict[str, dict[int, str]] = {"x86_64": _parse(_X86_64), "arm64": _parse(_ARM64)}
#: platform.machine() spellings of the architectures with a table.
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def arch_of(machine: str) -> str | None:
    """Return the table's name for ``platform.machine()`` ``machine`` (None: no table)."""
    return _ARCH.get(machine)


def family(name: str) -> str:
    """Return the family of the syscall called ``name``."""
    return FAMILY_OF.get(name, "other")


def family_of_number(arch: str, number: int) -> str:
    """Return the family of syscall ``number`` on ``arch`` ("x86_64" or "arm64")."""
    name = SYSCALLS[arch].get(number)
    return "other" if name is None else family(name)


def lookup_table(arch: str) -> np.ndarray:
    """Return the family code of every syscall number below MAX_SYSCALL_ID on ``arch``, as
    the u8 array the BPF program indexes."""
    codes = {f: i for i, f in enumerate(FAMILIES)}
    out = np.zeros(MAX_SYSCALL_ID, dtype=np.uint8)
    for number, name in SYSCALLS[arch].items():
        out[number] = codes[family(name)]
    return out
