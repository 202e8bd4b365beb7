/*
 * detd/autotune.hpp: a header-only C++ (C++14) wrapper of libdetd's
 * native autotuning API (detd/autotune.h; added in 0.4).
 *
 *   detd::Client client;                          // $DETD_SOCKET
 *   detd::Autotuner tuner(client, "native::mylib::rowsum@v3",
 *                         {"BLOCK=128", "BLOCK=256", "BLOCK=512"});
 *   size_t i = tuner.choose("rows=4096,cols=1024,dtype=float32",
 *       [&](size_t index, const std::string &config) {
 *           launch_variant(index, ...);              // async, on the stream
 *           return cudaGetLastError() == cudaSuccess;
 *       });
 *
 * Errors throw detd::Error (the code and detd_client_last_error()'s
 * message). A launch lambda that throws or returns false makes its
 * candidate fail (as a failing Triton config does); the exception does not
 * cross libdetd's C frames: it is caught, and the first one is rethrown
 * when every candidate failed. Autotuner remembers the keys it resolved:
 * a known key costs a map lookup and no daemon call.
 */
#ifndef DETD_AUTOTUNE_HPP
#define DETD_AUTOTUNE_HPP

#include <cstddef>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detd/autotune.h"

namespace detd {

/* A libdetd error: code is the negative DETD_E* (or -errno) value. */
class Error : public std::runtime_error {
  public:
    Error(int code, const std::string &what)
        : std::runtime_error(what), code_(code) {
    }
    int code() const noexcept {
        return code_;
    }

  private:
    int code_;
};

namespace detail {
inline void check(int rc, const char *call) {
    if (rc == 0)
        return;
    std::string msg = std::string(call) + ": " + detd_err_name(rc);
    const char *why = detd_client_last_error();
    msg += ": ";
    msg += why[0] != '\0' ? why : detd_strerror(rc);
    throw Error(rc, msg);
}
} // namespace detail

/* An open detd_client (RAII; movable, not copyable). */
class Client {
  public:
    /* socket: nullptr for $DETD_SOCKET, else the default socket. */
    explicit Client(const char *socket = nullptr,
                    const detd_identity *identity = nullptr) {
        detail::check(detd_client_open(socket, identity, &c_),
                      "detd_client_open");
    }
    ~Client() {
        detd_client_close(c_);
    }
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;
    Client(Client &&o) noexcept : c_(o.c_) {
        o.c_ = nullptr;
    }
    Client &operator=(Client &&o) noexcept {
        if (this != &o) {
            detd_client_close(c_);
            c_ = o.c_;
            o.c_ = nullptr;
        }
        return *this;
    }
    detd_client *get() const noexcept {
        return c_;
    }

  private:
    detd_client *c_ = nullptr;
};

/* Options (detd_autotune_options, initialized). */
struct Options {
    Options() {
        detd_autotune_options_init(&raw);
    }
    detd_autotune_options raw;
};

/* The arch of the current CUDA device ("sm90"); throws without CUDA. */
inline std::string cuda_arch() {
    char buf[32];
    detail::check(detd_autotune_arch(buf, sizeof buf), "detd_autotune_arch");
    return buf;
}

/* "native::<name>@<guard>". */
inline std::string native_kernel_id(const std::string &name,
                                    const std::string &guard) {
    std::vector<char> buf(name.size() + guard.size() + 16);
    detail::check(detd_native_kernel_id(name.c_str(), guard.c_str(), buf.data(),
                                        buf.size()),
                  "detd_native_kernel_id");
    return buf.data();
}

namespace detail {
template <class Launch> struct LaunchCtx {
    Launch *fn;
    std::exception_ptr first;
    static int call(void *user, size_t index, const char *config) {
        auto *self = static_cast<LaunchCtx *>(user);
        try {
            return (*self->fn)(index, std::string(config)) ? 0 : 1;
        } catch (...) {
            if (!self->first)
                self->first = std::current_exception();
            return 1;
        }
    }
};
} // namespace detail

/*
 * One call of detd_autotune(). launch: callable (size_t index, const
 * std::string &config) -> bool (true: launched). Returns the committed
 * candidate's index; result (optional) says how it was decided.
 */
template <class Launch>
size_t autotune(const Client &client, const detd_key &key, Launch &&launch,
                const Options &options = Options(),
                detd_autotune_result *result = nullptr) {
    using Fn = typename std::remove_reference<Launch>::type;
    detail::LaunchCtx<Fn> ctx{&launch, nullptr};
    size_t index = 0;
    int rc = detd_autotune(client.get(), &key, &detail::LaunchCtx<Fn>::call,
                           &ctx, &options.raw, &index, result);
    if (rc == DETD_ENOCAND && ctx.first)
        std::rethrow_exception(ctx.first);
    detail::check(rc, "detd_autotune");
    return index;
}

/*
 * A native autotuner: one kernel id and one candidate list, any number of
 * keys. choose() asks detd once per key per process (thread-safe; the
 * daemon call itself runs unlocked, so threads on different keys do not
 * wait for each other).
 */
class Autotuner {
  public:
    Autotuner(const Client &client, std::string kernel,
              std::vector<std::string> candidates, std::string arch = "",
              const char *namespace_ = nullptr)
        : client_(client), kernel_(std::move(kernel)),
          candidates_(std::move(candidates)), arch_(std::move(arch)),
          ns_(namespace_ != nullptr ? namespace_ : "") {
        for (const auto &c : candidates_)
            ptrs_.push_back(c.c_str());
    }

    Options &options() noexcept {
        return options_;
    }
    const std::vector<std::string> &candidates() const noexcept {
        return candidates_;
    }

    /* The committed candidate's index for key (see autotune()). */
    template <class Launch>
    size_t choose(const std::string &key, Launch &&launch,
                  detd_autotune_result *result = nullptr) {
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = known_.find(key);
            if (it != known_.end())
                return it->second;
            if (arch_.empty())
                arch_ = cuda_arch();
        }
        detd_key k{};
        k.namespace_ = ns_.empty() ? nullptr : ns_.c_str();
        k.arch = arch_.c_str();
        k.kernel = kernel_.c_str();
        k.key = key.c_str();
        k.candidates = ptrs_.data();
        k.n_candidates = ptrs_.size();
        size_t i = autotune(client_, k, std::forward<Launch>(launch), options_,
                            result);
        std::lock_guard<std::mutex> g(mu_);
        known_.emplace(key, i);
        return i;
    }

  private:
    const Client &client_;
    std::string kernel_;
    std::vector<std::string> candidates_;
    std::vector<const char *> ptrs_;
    std::string arch_;
    std::string ns_;
    Options options_;
    std::mutex mu_;
    std::unordered_map<std::string, size_t> known_;
};

} // namespace detd

#endif /* DETD_AUTOTUNE_HPP */
