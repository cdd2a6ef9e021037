// A light SSE load client for bench/http-latency.mjs: one epoll loop, HTTP/1.1 keep-alive,
// chunked or length-framed bodies, and a CLOCK_MONOTONIC stamp (the clock of Node's
// process.hrtime) per read. It exists so that on a small machine the client's own CPU does not
// crowd the server it measures: parsing 256 streams in node:http costs a good part of a core.
//
//   sse-client HOST PORT CONCURRENCY < requests
// stdin: one request per line, "REQUEST_ID<TAB>JSON_BODY"; they run in waves of CONCURRENCY
// (a wave starts when the previous one has ended), each on its own kept-alive connection.
// stdout: one line per request, "REQUEST_ID OK STATUS SENT_MS T0 T1 ...", where OK is 1 when
// the stream ended with a `done` event and Tk is when the event of the token with index k was
// read (ms on CLOCK_MONOTONIC; "-" for an index never seen).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what) {
  perror(what);
  exit(2);
}

typedef struct {
  char *id;
  char *body;
  int ok, status;
  double sent;
  double *times;
  int ntimes, cap;
} Request;

enum { HEAD, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, CHUNK_TRAILER, LENGTH_BODY, DONE };

typedef struct {
  int fd;
  Request *req;
  char *out; // request bytes still to send
  size_t out_len, out_off;
  char *in; // raw bytes not yet consumed by the HTTP framing
  size_t in_len, in_cap;
  char *sse; // de-chunked body not yet split into events
  size_t sse_len, sse_cap;
  int state, chunked, keep_alive;
  long remaining; // bytes left in the current chunk or the length-framed body
} Conn;

static struct sockaddr_in addr;
static int ep;

static void grow(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return;
  size_t next = *cap ? *cap : 4096;
  while (next < need) next *= 2;
  if (!(*buf = realloc(*buf, next))) die("realloc");
  *cap = next;
}

static void record_token(Request *r, long index, double at) {
  if (index < 0 || index > 1000000) return;
  if (index >= r->cap) {
    int cap = r->cap ? r->cap : 64;
    while (cap <= index) cap *= 2;
    if (!(r->times = realloc(r->times, sizeof(double) * (size_t)cap))) die("realloc");
    for (int i = r->cap; i < cap; i++) r->times[i] = -1;
    r->cap = cap;
  }
  r->times[index] = at;
  if (index + 1 > r->ntimes) r->ntimes = (int)index + 1;
}

// Splits the de-chunked body into SSE events; only `data:` events of type token or done count.
static void take_events(Conn *c, double at) {
  size_t start = 0;
  for (;;) {
    char *end = memmem(c->sse + start, c->sse_len - start, "\n\n", 2);
    if (!end) break;
    size_t len = (size_t)(end - (c->sse + start));
    char *frame = c->sse + start;
    if (len > 6 && memcmp(frame, "data: ", 6) == 0) {
      frame[len] = '\0'; // the first '\n' of the separator
      if (strncmp(frame + 6, "{\"type\":\"token\"", 15) == 0) {
        char *ix = strstr(frame, "\"index\":");
        if (ix) record_token(c->req, strtol(ix + 8, NULL, 10), at);
      } else if (strncmp(frame + 6, "{\"type\":\"done\"", 14) == 0) {
        c->req->ok = 1;
      }
    }
    start += len + 2;
  }
  memmove(c->sse, c->sse + start, c->sse_len - start);
  c->sse_len -= start;
}

static void body_bytes(Conn *c, const char *p, size_t n, double at) {
  grow(&c->sse, &c->sse_cap, c->sse_len + n + 1);
  memcpy(c->sse + c->sse_len, p, n);
  c->sse_len += n;
  if (c->req->status == 200) take_events(c, at);
  else c->sse_len = 0;
}

// Consumes what the framing allows; returns 1 when the response is complete.
static int parse(Conn *c, double at) {
  size_t off = 0;
  while (c->state != DONE) {
    char *p = c->in + off;
    size_t n = c->in_len - off;
    if (c->state == HEAD) {
      char *end = memmem(p, n, "\r\n\r\n", 4);
      if (!end) break;
      *end = '\0';
      c->req->status = atoi(p + 9); // "HTTP/1.1 200 OK"
      c->chunked = strcasestr(p, "\r\ntransfer-encoding: chunked") != NULL;
      c->keep_alive = strcasestr(p, "\r\nconnection: close") == NULL;
      char *cl = strcasestr(p, "\r\ncontent-length:");
      c->remaining = cl ? strtol(cl + 17, NULL, 10) : 0;
      c->state = c->chunked ? CHUNK_SIZE : LENGTH_BODY;
      off += (size_t)(end - p) + 4;
    } else if (c->state == CHUNK_SIZE || c->state == CHUNK_CRLF || c->state == CHUNK_TRAILER) {
      char *end = memmem(p, n, "\r\n", 2);
      if (!end) break;
      off += (size_t)(end - p) + 2;
      if (c->state == CHUNK_SIZE) {
        c->remaining = strtol(p, NULL, 16);
        c->state = c->remaining > 0 ? CHUNK_DATA : CHUNK_TRAILER;
      } else if (c->state == CHUNK_CRLF) {
        c->state = CHUNK_SIZE;
      } else if (end == p) { // the empty line after the last chunk
        c->state = DONE;
      }
    } else { // CHUNK_DATA or LENGTH_BODY
      size_t take = n < (size_t)c->remaining ? n : (size_t)c->remaining;
      if (take > 0) body_bytes(c, p, take, at);
      off += take;
      c->remaining -= (long)take;
      if (c->remaining > 0) break;
      c->state = c->state == CHUNK_DATA ? CHUNK_CRLF : DONE;
    }
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
  return c->state == DONE;
}

static void watch(Conn *c, int op, unsigned events) {
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(ep, op, c->fd, &ev) < 0) die("epoll_ctl");
}

static void hang_up(Conn *c) {
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
}

static void start(Conn *c, Request *r) {
  c->req = r;
  r->sent = now_ms();
  size_t body_len = strlen(r->body);
  free(c->out);
  if (asprintf(&c->out,
               "POST /v1/generate HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
               "X-Request-Id: %s\r\nContent-Length: %zu\r\nConnection: keep-alive\r\n\r\n%s",
               inet_ntoa(addr.sin_addr), ntohs(addr.sin_port), r->id, body_len, r->body) < 0)
    die("asprintf");
  c->out_len = strlen(c->out);
  c->out_off = 0;
  c->in_len = c->sse_len = 0;
  c->state = HEAD;
  if (c->fd < 0) {
    if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) < 0) die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS)
      die("connect");
    watch(c, EPOLL_CTL_ADD, EPOLLIN | EPOLLOUT);
  } else {
    watch(c, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
  }
}

// Returns 1 when this connection's request has ended (completed or failed).
static int on_event(Conn *c, unsigned events) {
  if (events & EPOLLOUT) {
    while (c->out_off < c->out_len) {
      ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
      if (w < 0) {
        if (errno == EAGAIN) return 0;
        c->req->status = 0;
        hang_up(c);
        return 1;
      }
      c->out_off += (size_t)w;
    }
    watch(c, EPOLL_CTL_MOD, EPOLLIN);
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return 0;
  double at = now_ms();
  for (;;) {
    grow(&c->in, &c->in_cap, c->in_len + 65536);
    ssize_t n = read(c->fd, c->in + c->in_len, 65536);
    if (n > 0) {
      c->in_len += (size_t)n;
      if (parse(c, at)) {
        if (!c->keep_alive) hang_up(c);
        return 1;
      }
      continue;
    }
    if (n < 0 && errno == EAGAIN) return 0;
    hang_up(c); // closed or failed before the response ended
    if (c->req->status == 200) c->req->ok = 0;
    return 1;
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s HOST PORT CONCURRENCY < requests\n", argv[0]);
    return 2;
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) die("inet_pton");
  int concurrency = atoi(argv[3]);
  if (concurrency < 1) {
    fprintf(stderr, "CONCURRENCY must be >= 1\n");
    return 2;
  }

  Request *reqs = NULL;
  size_t nreqs = 0, cap = 0;
  char *line = NULL;
  size_t line_cap = 0;
  ssize_t len;
  while ((len = getline(&line, &line_cap, stdin)) > 0) {
    if (line[len - 1] == '\n') line[--len] = '\0';
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = '\0';
    if (nreqs == cap && !(reqs = realloc(reqs, sizeof(Request) * (cap = cap ? cap * 2 : 64))))
      die("realloc");
    reqs[nreqs++] = (Request){.id = strdup(line), .body = strdup(tab + 1)};
  }
  free(line);

  if ((ep = epoll_create1(0)) < 0) die("epoll_create1");
  Conn *conns = calloc((size_t)concurrency, sizeof(Conn));
  for (int i = 0; i < concurrency; i++) conns[i].fd = -1;
  struct epoll_event events[256];
  for (size_t wave = 0; wave < nreqs; wave += (size_t)concurrency) {
    size_t in_wave = nreqs - wave < (size_t)concurrency ? nreqs - wave : (size_t)concurrency;
    for (size_t i = 0; i < in_wave; i++) start(&conns[i], &reqs[wave + i]);
    size_t open = in_wave;
    while (open > 0) {
      int n = epoll_wait(ep, events, 256, -1);
      if (n < 0 && errno != EINTR) die("epoll_wait");
      for (int i = 0; i < n; i++) {
        Conn *c = events[i].data.ptr;
        if (c->fd < 0) continue;
        if (c->state == DONE) { // an idle kept-alive connection the server closed
          hang_up(c);
          continue;
        }
        if (on_event(c, events[i].events)) {
          c->state = DONE;
          if (c->fd >= 0) watch(c, EPOLL_CTL_MOD, 0);
          open--;
        }
      }
    }
  }

  for (size_t i = 0; i < nreqs; i++) {
    Request *r = &reqs[i];
    printf("%s %d %d %.6f", r->id, r->ok, r->status, r->sent);
    for (int k = 0; k < r->ntimes; k++) {
      if (r->times[k] < 0) printf(" -");
      else printf(" %.6f", r->times[k]);
    }
    putchar('\n');
  }
  return 0;
}
