/* How late this host's timer wakes a thread, by sleep primitive (issue 21): the release
 * thread spins through this error before each deadline, so it sets the CPU a distinct
 * deadline costs. Each primitive sleeps to N absolute deadlines 1 ms apart (a relative
 * timeout where the call takes only that) at SCHED_FIFO 2 when permitted, 1 ns timer slack,
 * as the release thread does, and prints the lateness quantiles in µs.
 * Usage: wake_error [N]   (default 3000) */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static struct timespec ts(int64_t ns) {
  struct timespec t = {ns / 1000000000LL, ns % 1000000000LL};
  return t;
}

static int by_value(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static const char *NAMES[] = {
    "clock_nanosleep, absolute", "futex wait, relative (std park_timeout)",
    "futex wait_bitset, absolute", "timerfd, absolute", "epoll_pwait2, relative"};

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3000;
  if (n < 100) n = 100;
  int64_t *late = malloc(sizeof *late * n);
  prctl(PR_SET_TIMERSLACK, 1UL);
  struct sched_param p = {.sched_priority = 2};
  int fifo = sched_setscheduler(0, SCHED_FIFO, &p) == 0;
  printf("scheduling: %s\n", fifo ? "SCHED_FIFO 2" : "SCHED_OTHER (real-time not permitted)");
  int tfd = timerfd_create(CLOCK_MONOTONIC, 0), ep = epoll_create1(0);
  uint32_t word = 0;
  for (int mode = 0; mode < 5; mode++) {
    int64_t t = now_ns() + 1000000;
    for (int i = 0; i < n; i++) {
      t += 1000000;
      struct timespec at = ts(t);
      int64_t left = t - now_ns();
      struct timespec rel = ts(left > 0 ? left : 0);
      switch (mode) {
      case 0: clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL); break;
      case 1: syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &rel, NULL, 0); break;
      case 2:
        syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, &at, NULL, FUTEX_BITSET_MATCH_ANY);
        break;
      case 3: {
        struct itimerspec it = {{0, 0}, at};
        uint64_t fired;
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &it, NULL);
        if (read(tfd, &fired, sizeof fired) < 0) return 1;
        break;
      }
      case 4: {
        struct epoll_event ev;
        syscall(SYS_epoll_pwait2, ep, &ev, 1, &rel, NULL, 0);
        break;
      }
      }
      late[i] = now_ns() - t;
    }
    qsort(late, n, sizeof *late, by_value);
    printf("%-42s late p50 %6.1f  p90 %6.1f  p95 %6.1f  p99 %6.1f µs\n", NAMES[mode],
           late[n / 2] / 1e3, late[n * 9 / 10] / 1e3, late[n * 95 / 100] / 1e3,
           late[n * 99 / 100] / 1e3);
  }
  return 0;
}
