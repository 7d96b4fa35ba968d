/* System helpers for herd workers that must work even while the Haskell
 * scheduler is stuck in a non-allocating computation: they run on plain
 * OS threads or are plain system calls, never on a Haskell capability. */
#define _GNU_SOURCE
#include <sched.h>
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include "herd_sys.h"

/* Pin every thread that exists now to one CPU. sched_setaffinity acts on a
 * single thread, and the GHC runtime has already started several by the
 * time Haskell code runs; threads started later inherit the mask. Returns
 * 0 on success or the errno of the first failure. */
int herd_pin_process_threads(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    DIR *dir = opendir("/proc/self/task");
    if (dir == NULL) {
        return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
    }
    int result = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        pid_t tid = (pid_t) atoi(entry->d_name);
        if (sched_setaffinity(tid, sizeof set, &set) != 0 && result == 0
            && errno != ESRCH) {
            result = errno;
        }
    }
    closedir(dir);
    return result;
}

static void *watch_parent(void *arg)
{
    int fd = (int)(long) arg;
    char buf[64];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            /* The master's end of the pipe closed: it exited or was killed.
             * Exit at once, whatever the Haskell threads are doing. */
            _exit(70);
        }
    }
    return NULL;
}

/* Start a detached OS thread that ends the process when fd reaches end of
 * file. Returns 0 on success or the pthread error code. */
int herd_start_parent_watchdog(int fd)
{
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, watch_parent, (void *)(long) fd);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Make the kernel judge a TCP connection's liveness: keepalive probes after
 * idle_s seconds of silence, every interval_s seconds, and TCP_USER_TIMEOUT
 * so the connection fails once nothing has been acknowledged or received
 * for timeout_ms (covering both an idle link and one with unacknowledged
 * data). The peer's kernel answers the probes, so a worker stuck in a long
 * non-allocating computation still counts as alive, while a dead host or a
 * cut link is noticed within about timeout_ms. Returns 0 or an errno. */
int herd_set_liveness(int fd, int idle_s, int interval_s, int count, unsigned int timeout_ms)
{
    int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0) return errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s) != 0) return errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s) != 0) return errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) != 0) return errno;
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout_ms, sizeof timeout_ms) != 0) return errno;
    return 0;
}

/* epoll for the master's single-threaded loops (the reading thread of
   every link, and the evolve API's epoll loop): they wait here (an
   interruptible foreign call) instead of in GHC's IO manager. */
#include <sys/epoll.h>

int herd_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int herd_epoll_add(int epfd, int fd, int tag, int edge)
{
    struct epoll_event ev;
    ev.events = EPOLLIN | EPOLLRDHUP | (edge ? EPOLLET : 0);
    ev.data.u64 = (unsigned long long)(unsigned int)tag;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : errno;
}

int herd_epoll_del(int epfd, int fd)
{
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) == 0 ? 0 : errno;
}

/* Wait up to timeout_ms; write the tags of ready descriptors to tags (at
   most max). Returns their number, 0 on timeout or EINTR, -errno on error. */
int herd_epoll_wait(int epfd, int *tags, int max, int timeout_ms)
{
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) tags[i] = (int)evs[i].data.u64;
    return n;
}


/* Lower the scheduling priority of every thread that exists now to the
   given nice value (Linux keeps one per thread; threads started later
   inherit it). Returns 0 or the errno of the first failure. */
#include <sys/resource.h>
int herd_nice_process_threads(int value)
{
    DIR *dir = opendir("/proc/self/task");
    if (dir == NULL) {
        return setpriority(PRIO_PROCESS, 0, value) == 0 ? 0 : errno;
    }
    int result = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        int tid = atoi(entry->d_name);
        if (setpriority(PRIO_PROCESS, tid, value) != 0 && result == 0 && errno != ESRCH) {
            result = errno;
        }
    }
    closedir(dir);
    return result;
}
