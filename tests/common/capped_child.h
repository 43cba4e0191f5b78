// Runs a function in a forked child whose address space is capped at
// kChildAddressSpace (8 GiB) or another given cap, so that a size the code should have refused
// fails in the child only (std::bad_alloc, then abort), never at the
// kernel's OOM killer. Sanitizer runtimes reserve terabytes of shadow
// address space, so under ASan/TSan the child runs uncapped (the
// sanitizer's allocator then aborts on the oversized request itself).
//
//   ChildResult r = run_capped([] { return describe(train_status(huge)); });
//   ASSERT_TRUE(r.exited) << "died instead of refusing: " << r.text;
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

namespace lms::testing_support {

inline constexpr rlim_t kChildAddressSpace = rlim_t{8} << 30;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(LMS_SANITIZER_RUNTIME)
inline constexpr bool kCapAddressSpace = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kCapAddressSpace = false;
#else
inline constexpr bool kCapAddressSpace = true;
#endif
#else
inline constexpr bool kCapAddressSpace = true;
#endif

struct ChildResult {
  bool exited = false;  // exit status 0; false: killed (e.g. SIGABRT after std::bad_alloc)
  std::string text;     // what `fn` returned (as far as it got written)
};

// The process's virtual size (VmSize) in bytes; 0 when unreadable.
inline rlim_t virtual_size_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmSize: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return static_cast<rlim_t>(kib) * 1024;
}

// Runs `fn` in a forked child whose address space is capped at `cap`, or,
// when `above_current`, at the child's size at the fork plus `cap` (a
// tight cap that the libraries already mapped do not eat into).
inline ChildResult run_capped(const std::function<std::string()>& fn,
                              rlim_t cap = kChildAddressSpace, bool above_current = false) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const rlim_t bytes = above_current ? virtual_size_bytes() + cap : cap;
    struct rlimit limit = {bytes, bytes};
    if (kCapAddressSpace) ::setrlimit(RLIMIT_AS, &limit);
    const std::string text = fn();
    const ssize_t ignored = ::write(fds[1], text.data(), text.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) {
    r.text.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

}  // namespace lms::testing_support
