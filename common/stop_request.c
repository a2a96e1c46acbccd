#include "common/stop_request.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_signal;
static struct timespec g_first; /* when g_signal was set */
static const char *g_what; /* NULL: say nothing (the ranks other than 0) */

/* Only async-signal-safe calls here: clock_gettime, write, signal, raise. */
static void on_stop_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!g_signal) {
        g_first = now;
        g_signal = sig;
        if (!g_what) return;
        static const char head[] = "\nstop requested (";
        const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
        static const char tail[] = " (the same signal again, 2 s or more later, ends the process at once)\n";
        ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
        ignored = write(STDERR_FILENO, name, strlen(name));
        ignored = write(STDERR_FILENO, "): ", 3);
        ignored = write(STDERR_FILENO, g_what, strlen(g_what));
        ignored = write(STDERR_FILENO, tail, sizeof tail - 1);
        (void)ignored;
        return;
    }
    const long long ns = (long long)(now.tv_sec - g_first.tv_sec) * 1000000000LL + (now.tv_nsec - g_first.tv_nsec);
    if (ns >= STOP_REPEAT_SECONDS * 1000000000LL) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
}

void stop_request_catch(int sig, void (*handler)(int)) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
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
