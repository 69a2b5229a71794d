// The injection library under signals and fork (inject.hpp). A signal's handler does only what
// is safe in a handler: it writes the signal's number to a pipe, which a flusher thread reads
// to end the trace (a CUPTI flush, locks, stdio: none of it safe there); where the signal will
// end the process (its disposition was the default, or it is a crash), the handler waits for
// the flusher's word, at most kFlushWaitMs, then lets the signal do what it would have done. A
// signal that comes while this library holds a lock the flusher needs costs that wait, not a
// deadlock. Only the process that began the recording ends it: a child forked from it (a
// DataLoader's workers) keeps none of its threads, writes nothing to the parent's files and
// records nothing, and fork waits for a moment when the trace's buffers are empty, so the
// child's exit cannot write the parent's buffered lines a second time.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "trace/inject.hpp"

namespace xferscope::trace {

namespace {

constexpr int kFlushWaitMs = 2000;
constexpr int kSignals[] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
                            SIGABRT, SIGBUS,  SIGFPE, SIGILL};
struct sigaction previous[65];
int to_flusher[2] = {-1, -1};    // a signal's number, from its handler
int from_flusher[2] = {-1, -1};  // a byte once the trace is ended
pid_t owner = 0;                 // the process that records
void (*ending)() = nullptr;      // what ends the trace (inject.cpp's finish)

bool ends_process(int sig) {
  if (sig == SIGSEGV || sig == SIGABRT || sig == SIGBUS || sig == SIGFPE || sig == SIGILL)
    return true;
  const struct sigaction& old = previous[sig];
  return !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
}

void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& old = previous[sig];
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction) old.sa_sigaction(sig, info, context);
    return;
  }
  if (old.sa_handler == SIG_IGN) return;
  if (old.sa_handler != SIG_DFL && old.sa_handler) {
    old.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void on_signal(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  if (getpid() == owner && to_flusher[1] >= 0) {
    const char number = static_cast<char>(sig);
    if (write(to_flusher[1], &number, 1) == 1 && ends_process(sig)) {
      pollfd done{from_flusher[0], POLLIN, 0};
      while (poll(&done, 1, kFlushWaitMs) < 0 && errno == EINTR) {
      }
    }
  }
  errno = saved;
  chain(sig, info, context);
}

void flusher() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // a handler waiting for it never runs on it
  char number = 0;
  while (true) {
    const ssize_t got = read(to_flusher[0], &number, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    if (ending) ending();
    const char done = 1;
    while (write(from_flusher[1], &done, 1) < 0 && errno == EINTR) {
    }
  }
}

// fork: the parent's buffers emptied and held still while it forks; the child records nothing
void before_fork() {
  out_mutex.lock();
  if (out) std::fflush(out);
}
void after_fork_parent() { out_mutex.unlock(); }
void after_fork_child() {
  closed.store(true);  // its callbacks return at once; its exit ends nothing
  out = nullptr;       // the parent's file: never written, never closed (nothing is buffered)
  out_mutex.unlock();
}

}  // namespace

bool recording_here() { return owner != 0 && getpid() == owner; }

void watch_signals(void (*end)()) {
  owner = getpid();
  ending = end;
  if (pipe2(to_flusher, O_CLOEXEC) == 0 && pipe2(from_flusher, O_CLOEXEC) == 0) {
    std::thread(flusher).detach();
    for (int sig : kSignals) {
      struct sigaction action {};
      action.sa_sigaction = on_signal;
      action.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&action.sa_mask);
      sigaction(sig, &action, &previous[sig]);
    }
  }
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

}  // namespace xferscope::trace
