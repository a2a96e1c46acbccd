/* model/dist/dist_wire.c - messages and socket helpers of the rendezvous (see dist_wire.h). */
#include "model/dist/dist_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

double wire_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int wire_wait_seconds(void) {
    const char *v = getenv("FUSEDGPT_RENDEZVOUS_TIMEOUT");
    int s = v && *v ? atoi(v) : 0;
    return s > 0 ? s : DIST_WAIT_SECONDS;
}

WireMsg wire_msg(uint32_t type, int rank, int world, int node_rank) {
    WireMsg m;
    memset(&m, 0, sizeof m);
    m.magic = WIRE_MAGIC;
    m.type = type;
    m.rank = rank;
    m.world = world;
    m.node_rank = node_rank;
    if (gethostname(m.host, sizeof m.host - 1) != 0) snprintf(m.host, sizeof m.host, "?");
    m.host[sizeof m.host - 1] = 0;
    return m;
}

int wire_send(int fd, const WireMsg *m) {
    WireMsg w = *m;
    w.magic = htonl(m->magic);
    w.type = htonl(m->type);
    w.rank = (int32_t)htonl((uint32_t)m->rank);
    w.world = (int32_t)htonl((uint32_t)m->world);
    w.node_rank = (int32_t)htonl((uint32_t)m->node_rank);
    const char *p = (const char *)&w;
    size_t left = sizeof w;
    while (left > 0) {
        ssize_t k = send(fd, p, left, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        left -= (size_t)k;
    }
    return 0;
}

int wire_decode(WireMsg *m) {
    m->magic = ntohl(m->magic);
    m->type = ntohl(m->type);
    m->rank = (int32_t)ntohl((uint32_t)m->rank);
    m->world = (int32_t)ntohl((uint32_t)m->world);
    m->node_rank = (int32_t)ntohl((uint32_t)m->node_rank);
    m->host[sizeof m->host - 1] = 0;
    m->text[sizeof m->text - 1] = 0;
    return m->magic == WIRE_MAGIC ? 0 : -1;
}

int wire_recv(int fd, WireMsg *m, int timeout_ms) {
    char *p = (char *)m;
    size_t have = 0;
    double deadline = wire_now() + timeout_ms / 1e3;
    while (have < sizeof *m) {
        int wait = -1;
        if (timeout_ms >= 0) {
            double left = deadline - wire_now();
            if (left <= 0) return -2;
            wait = (int)(left * 1e3) + 1;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        int r = poll(&pf, 1, wait);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) continue; /* the deadline check above decides */
        ssize_t k = recv(fd, p + have, sizeof *m - have, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) return 0;
        if (k < 0) return errno == ECONNRESET ? 0 : -1; /* a reset is the peer going away too */
        have += (size_t)k;
    }
    return wire_decode(m) == 0 ? 1 : -1;
}

void wire_tune_socket(int fd) {
    int one = 1, idle = 10, interval = 5, count = 4;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

int dist_parse_master(const char *s, char *host, int host_len, int *port) {
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || (int)(colon - s) >= host_len) return -1;
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 1 || p > 65535) return -1;
    snprintf(host, (size_t)host_len, "%.*s", (int)(colon - s), s);
    *port = (int)p;
    return 0;
}
