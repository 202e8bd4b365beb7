/*
 * native_cpp: the C++ header (detd/autotune.hpp) against a real daemon,
 * driven by test_native.py.
 *
 *   native_cpp SOCKET KERNEL KEYS MODE LOG
 *
 * MODE ok: candidates BLOCK=64/128/256; the launch lambda throws for
 * BLOCK=128 (its candidate fails), the timer makes BLOCK=256 fastest.
 * Every key is chosen twice: the second time from the Autotuner's memory.
 * MODE allthrow: every launch throws; the timing process gets the first
 * exception back, a process that did not time gets detd::Error
 * DETD_ENOCAND. Prints "RESULT key=.. index=.. config=.. timed_here=..",
 * "AGAIN key=.. index=..", "THREW <what>" or "ERROR <name> <what>"; every
 * timer call appends "pid key index" to LOG.
 */
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "detd/autotune.hpp"

namespace {

struct TimerCtx {
    FILE *log;
    std::string key;
};

int timer(void *user, size_t index, const char *config, detd_launch_cb fn,
          void *launch_user, unsigned warmup, unsigned reps, double *ret_ms) {
    auto *t = static_cast<TimerCtx *>(user);
    std::fprintf(t->log, "%d %s %zu\n", (int)getpid(), t->key.c_str(), index);
    std::fflush(t->log);
    for (unsigned w = 0; w < warmup; w++)
        if (fn(launch_user, index, config) != 0)
            return 1;
    for (unsigned r = 0; r < reps; r++) {
        if (fn(launch_user, index, config) != 0)
            return 1;
        ret_ms[r] = 3.0 - (double)index; /* the last candidate is fastest */
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: native_cpp SOCKET KERNEL KEYS MODE LOG\n");
        return 2;
    }
    const std::string mode = argv[4];
    TimerCtx tctx{std::fopen(argv[5], "a"), ""};
    if (tctx.log == nullptr)
        return 1;
    try {
        detd::Client client(argv[1]);
        detd::Autotuner tuner(client, argv[2],
                              {"BLOCK=64", "BLOCK=128", "BLOCK=256"}, "cpu");
        tuner.options().raw.timer = timer;
        tuner.options().raw.timer_user = &tctx;
        tuner.options().raw.reps = 3;
        int keys = std::atoi(argv[3]);
        for (int k = 0; k < keys; k++) {
            tctx.key = "n=" + std::to_string(k);
            auto launch = [&](size_t index, const std::string &config) {
                if (mode == "allthrow" || config == "BLOCK=128")
                    throw std::runtime_error("launch of " + config +
                                             ": too many resources requested");
                return index < 3;
            };
            detd_autotune_result res{};
            res.size = sizeof res;
            size_t i = tuner.choose(tctx.key, launch, &res);
            std::printf("RESULT key=%s index=%zu config=%s timed_here=%d "
                        "n_failed=%zu\n",
                        tctx.key.c_str(), i, res.config, res.timed_here,
                        res.n_failed);
            size_t again = tuner.choose(tctx.key, launch);
            std::printf("AGAIN key=%s index=%zu\n", tctx.key.c_str(), again);
        }
    } catch (const detd::Error &e) {
        std::printf("ERROR %s %s\n", detd_err_name(e.code()), e.what());
    } catch (const std::exception &e) {
        std::printf("THREW %s\n", e.what());
    }
    std::fclose(tctx.log);
    return 0;
}
