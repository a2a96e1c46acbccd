/* common/stop_request.h - a stop asked for by a signal, taken at a safe point.
 *
 * SIGINT (Ctrl-C) and SIGTERM (a scheduler's preemption, `kill`) end a training run at the end of a
 * step, with a checkpoint, rather than losing everything since the last one. A repeat of the
 * signal STOP_REPEAT_SECONDS or more after the first ends the process at once (the signal's default
 * action); a repeat sooner is taken as the same request, since a scheduler may signal both the
 * launcher, which passes it on, and its workers. */
#ifndef FUSEDGPT_STOP_REQUEST_H
#define FUSEDGPT_STOP_REQUEST_H

#define STOP_REPEAT_SECONDS 2

/* Takes over SIGINT and SIGTERM (those not ignored: stop_request_catch) for the rest of the process.
 * `what` (a static string) ends the line printed on the first signal, what happens next; NULL prints
 * nothing (the ranks other than 0, whose line would repeat rank 0's). */
void stop_request_install(const char *what);

/* Sets handler for sig unless the process started with sig ignored: a job started in the
 * background of a script (`cmd &`) ignores SIGINT so that Ctrl-C meant for the foreground passes it
 * by, and keeps ignoring it. */
void stop_request_catch(int sig, void (*handler)(int));

/* The signal that asked for a stop, or 0. */
int stop_request_signal(void);

/* Ends the process as the signal would have, once a stop it asked for is done (the checkpoint
 * written): a shell then sees a process the signal ended, so a script's loop stops as it does for
 * any program Ctrl-C ends. */
void stop_request_end(int sig);

/* The exit status of a launcher's worker stopped on request (128 + sig, what a shell shows for a
 * process the signal ended): the launcher counts it as stopped, not failed. */
int stop_request_exit_status(int sig);

/* What a stop signal means, for a handler of its own (the launcher's, which passes it on): the first
 * (recorded: stop_request_signal; SIGPIPE ignored from then on), the same request again (sooner than
 * STOP_REPEAT_SECONDS), or a repeat that asks to end at once. Async-signal-safe. */
typedef enum { STOP_FIRST, STOP_SAME, STOP_REPEATED } StopKind;
StopKind stop_request_note(int sig);

/* "SIGINT", "SIGTERM" or "signal N", for messages. */
const char *stop_request_name(int sig);

#endif
