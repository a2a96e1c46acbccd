#include "common/stop_request.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;
static volatile long long g_first_ns; /* when g_signal was set (CLOCK_MONOTONIC) */
static const char *g_what;            /* NULL: say nothing (the ranks other than 0) */

static long long now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

StopKind stop_request_note(int sig) {
    const long long now = now_ns();
    if (!g_signal) {
        g_first_ns = now;
        g_signal = sig;
        /* a Ctrl-C also ends a `| tee` beside us: a write to its pipe must fail, not end the process
         * before the checkpoint */
        signal(SIGPIPE, SIG_IGN);
        return STOP_FIRST;
    }
    return now - g_first_ns >= STOP_REPEAT_SECONDS * 1000000000LL ? STOP_REPEATED : STOP_SAME;
}

/* Only async-signal-safe calls here: clock_gettime, write, signal, raise. */
static void on_stop_signal(int sig) {
    const int saved = errno;
    const StopKind kind = stop_request_note(sig);
    if (kind == STOP_FIRST && g_what) {
        static const char head[] = "\nstop requested (";
        const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
        static const char tail[] = " (the same signal again, 2 s or more later, ends the process at once)\n";
        ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
        ignored = write(STDERR_FILENO, name, strlen(name));
        ignored = write(STDERR_FILENO, "): ", 3);
        ignored = write(STDERR_FILENO, g_what, strlen(g_what));
        ignored = write(STDERR_FILENO, tail, sizeof tail - 1);
        (void)ignored;
    } else if (kind == STOP_REPEATED) {
        /* said, since a checkpoint being written is left unfinished: the run resumes from the last whole one */
        static const char line[] = "\nstop requested again: ending at once; a checkpoint being written is left "
                                   "unfinished, and -y 1 resumes from the newest whole one\n";
        if (g_what) {
            ssize_t ignored = write(STDERR_FILENO, line, sizeof line - 1);
            (void)ignored;
        }
        signal(sig, SIG_DFL);
        raise(sig);
    }
    errno = saved;
}

void stop_request_catch(int sig, void (*handler)(int)) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask); /* one handler at a time: a SIGTERM inside the SIGINT's waits for it */
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, NULL);
}

void stop_request_install(const char *what) {
    g_what = what;
    stop_request_catch(SIGINT, on_stop_signal);
    stop_request_catch(SIGTERM, on_stop_signal);
}

int stop_request_signal(void) {
    return g_signal;
}

void stop_request_end(int sig) {
    fflush(stdout);
    fflush(stderr);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

int stop_request_exit_status(int sig) {
    return 128 + sig;
}

const char *stop_request_name(int sig) {
    static char other[24];
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    snprintf(other, sizeof other, "signal %d", sig);
    return other;
}
