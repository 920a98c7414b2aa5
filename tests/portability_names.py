"""What Windows lacks or runs differently, for the portability scan (tests/portability_scan.py)."""

from __future__ import annotations

POSIX_MODULES = frozenset({"resource", "fcntl", "pwd", "grp", "termios", "tty", "pty", "posix", "syslog", "crypt",
                           "spwd", "nis", "readline", "curses"})
# os names that Windows's os module lacks (the ones worth naming; Python 3.10-3.13)
OS_POSIX_ONLY = frozenset({
    "fork", "forkpty", "register_at_fork", "killpg", "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid", "setuid", "seteuid", "setgid", "setegid", "setgroups", "setresuid", "setresgid",
    "setreuid", "setregid", "initgroups", "getpgid", "setpgid", "getpgrp", "setpgrp", "getsid", "setsid",
    "getpriority", "setpriority", "nice", "sched_getaffinity", "sched_setaffinity", "sched_yield",
    "sched_get_priority_max", "sched_get_priority_min", "sched_setscheduler", "sched_getscheduler", "getloadavg",
    "sysconf", "sysconf_names", "confstr", "confstr_names", "pathconf", "fpathconf", "pathconf_names", "uname",
    "mkfifo", "mknod", "major", "minor", "makedev", "chown", "lchown", "fchown", "chroot", "fchdir", "statvfs",
    "fstatvfs", "sync", "wait", "wait3", "wait4", "waitid", "WNOHANG", "WUNTRACED", "WCONTINUED", "WIFEXITED",
    "WEXITSTATUS", "WIFSIGNALED", "WTERMSIG", "WIFSTOPPED", "WSTOPSIG", "WCOREDUMP", "openpty", "ttyname",
    "ctermid", "O_DIRECTORY", "O_NOFOLLOW", "O_CLOEXEC", "O_NONBLOCK", "O_SYNC", "O_DSYNC", "O_NOCTTY",
    "O_NDELAY", "O_ASYNC", "O_NOATIME", "O_PATH", "O_TMPFILE", "pipe2", "posix_spawn", "posix_spawnp",
    "posix_fadvise", "posix_fallocate", "pread", "pwrite", "preadv", "pwritev", "readv", "writev", "sendfile",
    "memfd_create", "eventfd", "splice", "getrandom", "lockf", "getxattr", "setxattr", "listxattr",
    "removexattr", "pidfd_open", "setns", "unshare", "plock",
})
# everything the signal module offers on Windows; any other name is POSIX-only
SIGNAL_ON_WINDOWS = frozenset({
    "SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIGBREAK", "CTRL_C_EVENT", "CTRL_BREAK_EVENT",
    "SIG_DFL", "SIG_IGN", "NSIG", "signal", "getsignal", "raise_signal", "set_wakeup_fd", "default_int_handler",
    "strsignal", "valid_signals", "Signals", "Handlers",
})
WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC", "O_EXCL"})
PSEUDO_FILES = ("/proc/", "/sys/", "/dev/")
CATCH_ALL = frozenset({"Exception", "BaseException", "*"})
# what Windows raises for each kind of finding, so a handler for it is a guard (None: nothing is raised)
RAISES = {"module": {"ImportError", "ModuleNotFoundError"}, "name": {"AttributeError"},
           "from-name": {"ImportError"}, "folder": {"OSError", "PermissionError"},
           "pseudo-file": {"OSError", "FileNotFoundError"}, "library": {"OSError"},
           "start-method": {"ValueError"}, "differs": None}
WHY = {"module": "Windows has no such module", "name": "Windows lacks this name",
        "from-name": "Windows lacks this name", "folder": "Windows cannot open a folder with os.open",
        "pseudo-file": "no such file on Windows", "library": "a Unix shared library",
        "start-method": "Windows has only the spawn start method",
        "differs": "on Windows signal 0 is CTRL_C_EVENT, any other ends the process: psutil.pid_exists, "
                   "signal.raise_signal, or a platform branch"}
