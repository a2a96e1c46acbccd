/* model/dist/dist_wire.h - the rendezvous protocol between workers and node 0's launcher (internal to
 * model/dist/dist.c and model/dist/dist_worker.c).
 *
 * One fixed-size message type travels both ways over TCP; integers in network byte order.
 *   worker -> master  HELLO  (rank, world, node_rank, host; rank 0 adds the NCCL id)
 *   master -> worker  ID     (the id, once all `world` ranks said HELLO)
 *   worker -> master  DONE   (finished normally; EOF after DONE is not a failure)
 *   worker -> master  FAILED (text: NCCL's asynchronous error)
 *   master -> worker  ABORT  (rank: the rank that failed, or -1 with a reason in text)
 *   master -> worker  REJECT (text: why this worker cannot join)
 * The connection stays open for the whole run: it is the control channel of the watchdogs. */
#ifndef FUSEDGPT_DIST_WIRE_H
#define FUSEDGPT_DIST_WIRE_H

#include <stdint.h>

#include "model/dist/dist.h"

#define WIRE_MAGIC 0x46475231u /* "FGR1": protocol version 1 */
#define WIRE_HOST_LEN 64
#define WIRE_TEXT_LEN 200

enum { MSG_HELLO = 1, MSG_ID, MSG_DONE, MSG_FAILED, MSG_ABORT, MSG_REJECT };

typedef struct {
    uint32_t magic, type;
    int32_t rank, world, node_rank;
    char host[WIRE_HOST_LEN];
    unsigned char id[DIST_ID_BYTES];
    char text[WIRE_TEXT_LEN];
} WireMsg;

/* Sends one message (blocking, no SIGPIPE). 0, or -1 when the peer is gone. */
int wire_send(int fd, const WireMsg *m);
/* Receives one message within timeout_ms (-1: no limit). 1: got it; 0: EOF; -1: error or bad
 * magic; -2: timed out. */
int wire_recv(int fd, WireMsg *m, int timeout_ms);
/* Completes a message whose bytes arrived (host byte order after this). 0, or -1 on a bad magic. */
int wire_decode(WireMsg *m);
/* A message of this type from this process (host filled in). */
WireMsg wire_msg(uint32_t type, int rank, int world, int node_rank);

/* Keepalive probes so that a host that vanishes (no FIN) is noticed within ~30 s; no Nagle. */
void wire_tune_socket(int fd);
/* Seconds the rendezvous waits: DIST_WAIT_SECONDS, or FUSEDGPT_RENDEZVOUS_TIMEOUT (tests). */
int wire_wait_seconds(void);
double wire_now(void);

#endif
