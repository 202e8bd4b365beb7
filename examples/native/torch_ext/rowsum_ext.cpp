// A PyTorch C++ extension choosing rowsum's variant with detd (through the
// C++ header detd/autotune.hpp), built and loaded at run time by
// torch_rowsum.py with torch.utils.cpp_extension.load().
//
//   y, index, timed_here = ext.rowsum(x, stream, kernel_id)
//
// x: a contiguous 2-D float32 CUDA tensor; stream: the raw CUDA stream
// (torch.cuda.current_stream().cuda_stream); kernel_id: the native kernel
// id "native::examples::rowsum@<hash of rowsum_kernels.cu>", the same as
// the C program's, so both share their decisions.
#include <torch/extension.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "detd/autotune.hpp"
#include "rowsum.h"

namespace {

std::vector<std::string> variants() {
    std::vector<std::string> v;
    for (int i = 0; i < rowsum_variant_count(); i++)
        v.emplace_back(rowsum_variant_config(i));
    return v;
}

// One client ($DETD_SOCKET) and one Autotuner per process.
detd::Autotuner &tuner(const std::string &kernel_id) {
    static std::mutex mu;
    static std::unique_ptr<detd::Client> client;
    static std::unique_ptr<detd::Autotuner> t;
    std::lock_guard<std::mutex> g(mu);
    if (!t) {
        client.reset(new detd::Client());
        t.reset(new detd::Autotuner(*client, kernel_id, variants()));
    }
    return *t;
}

std::tuple<torch::Tensor, int64_t, bool> rowsum(torch::Tensor x, int64_t stream,
                                                const std::string &kernel_id) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 &&
                    x.dim() == 2 && x.is_contiguous(),
                "rowsum: x must be a contiguous 2-D float32 CUDA tensor");
    const int rows = (int)x.size(0), cols = (int)x.size(1);
    auto y = torch::empty({rows}, x.options());
    void *s = reinterpret_cast<void *>(stream);
    detd::Autotuner &t = tuner(kernel_id);
    t.options().raw.stream = s; // CUDA events on the caller's stream
    const std::string key = "rows=" + std::to_string(rows) +
                            ",cols=" + std::to_string(cols) + ",dtype=float32";
    detd_autotune_result res{};
    res.size = sizeof res;
    size_t i = t.choose(
        key,
        [&](size_t index, const std::string &) {
            return rowsum_launch((int)index, x.data_ptr<float>(),
                                 y.data_ptr<float>(), rows, cols, s) == 0;
        },
        &res);
    int rc = rowsum_launch((int)i, x.data_ptr<float>(), y.data_ptr<float>(),
                           rows, cols, s);
    TORCH_CHECK(rc == 0, "rowsum: launch of ", t.candidates()[i],
                " failed: CUDA error ", rc);
    return std::make_tuple(y, (int64_t)i, res.timed_here != 0);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("rowsum", &rowsum, "rowsum with the variant detd chose", py::arg("x"),
          py::arg("stream"), py::arg("kernel_id"));
    m.def("variants", &variants);
}
