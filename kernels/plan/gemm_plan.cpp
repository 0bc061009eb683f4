#include "plan/gemm_plan.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/DeviceType.h>
#include <torch/headeronly/util/Exception.h>

namespace tiledmm {
namespace {

using torch::headeronly::DeviceType;
using torch::headeronly::ScalarType;
using torch::stable::Tensor;

std::string shape_of(const Tensor& t) {
  std::ostringstream s;
  s << "[";
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? ", " : "") << t.size(d);
  s << "]";
  return s.str();
}

std::string device_of(const Tensor& t) {
  auto device = t.device();
  if (device.type() == DeviceType::CPU) return "cpu";
  if (device.type() == DeviceType::CUDA) return "cuda:" + std::to_string(device.index());
  return "device type " + std::to_string(static_cast<int>(device.type()));
}

std::string dtype_of(const Tensor& t) {
  switch (t.scalar_type()) {
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Int: return "torch.int32";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + torch::headeronly::toString(t.scalar_type());
  }
}

// Throws the message that `message` builds, alone: users see what is wrong, not where in tiledmm
// it was found. The message is built only on failure (a shape's text costs about a microsecond,
// and every call checks).
template <typename Message>
void check(bool ok, const Message& message) {
  if (!ok) throw std::runtime_error(message());
}

template <typename... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

bool supported_dtype(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::Half ||
         t == ScalarType::BFloat16;
}

// What any product needs: dense tensors of one supported dtype on one device.
void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check(a.layout() == torch::headeronly::Layout::Strided && b.layout() == torch::headeronly::Layout::Strided,
        [&] { return text(op, ": only dense (strided) tensors are supported"); });
  check(a.scalar_type() == b.scalar_type(), [&] {
    return text(op, ": expected both tensors to have the same dtype, got a: ", dtype_of(a), " and b: ", dtype_of(b));
  });
  check(supported_dtype(a.scalar_type()), [&] {
    return text(op, ": unsupported dtype ", dtype_of(a),
                "; supported: torch.float32, torch.float64, torch.float16, torch.bfloat16");
  });
  check(a.device() == b.device(), [&] {
    return text(op, ": expected both tensors on the same device, got a on ", device_of(a), " and b on ",
                device_of(b));
  });
}

void check_operands(const char* op, const Tensor& a, const Tensor& b, int64_t rank) {
  check(a.dim() == rank && b.dim() == rank, [&] {
    return text(op, ": expected ", rank, "-D tensors, got a of shape ", shape_of(a), " (", a.dim(),
                "-D) and b of shape ", shape_of(b), " (", b.dim(), "-D)");
  });
  check_pair(op, a, b);
  check(a.size(rank - 1) == b.size(rank - 2), [&] {
    return text(op, ": inner dimensions differ: a of shape ", shape_of(a), " has ", a.size(rank - 1),
                " columns, b of shape ", shape_of(b), " has ", b.size(rank - 2), " rows");
  });
  check(rank == 2 || a.size(0) == b.size(0),
        [&] { return text(op, ": batch sizes differ: a of shape ", shape_of(a), ", b of shape ", shape_of(b)); });
}

// The strides of a rows x cols matrix as a row- or column-major operand, or nothing when
// neither dimension is unit-stride (a slice with a step, an expanded inner dimension).
std::optional<MatrixOperand> describe(int64_t rows, int64_t cols, int64_t row_stride,
                                      int64_t col_stride) {
  if (col_stride == 1 || cols == 1)
    return MatrixOperand{nullptr, rows == 1 ? cols : row_stride, 0, true};
  if (row_stride == 1 || rows == 1) return MatrixOperand{nullptr, col_stride, 0, false};
  return std::nullopt;
}

// linear's bias for a product with n columns: of a's dtype, on its device, of shape (n,), (1,) or ().
// The words are tiledmm.linear's (tiledmm/autograd.py's _check_bias).
void check_bias(const Tensor& a, const Tensor& bias, int64_t n) {
  check(bias.scalar_type() == a.scalar_type(), [&] {
    return text("tiledmm.linear: a bias of dtype ", dtype_of(bias), " for operands of dtype ", dtype_of(a));
  });
  check(bias.device() == a.device(),
        [&] { return text("tiledmm.linear: a bias on ", device_of(bias), " for operands on ", device_of(a)); });
  check(bias.dim() == 0 || (bias.dim() == 1 && (bias.size(0) == 1 || bias.size(0) == n)), [&] {
    return text("tiledmm.linear: a bias of shape ", shape_of(bias), " for a product with ", n,
                " columns (expected [", n, "])");
  });
}

// t as describe_as(x) describes it (an optional MatrixOperand, its data unset), or where that finds
// no layout, its contiguous copy as described, the copy kept in `keep`.
template <typename Describe>
MatrixOperand plan_or_copy(const Tensor& t, std::vector<Tensor>& keep, Describe describe_as) {
  std::optional<MatrixOperand> operand = describe_as(t);
  const Tensor* source = &t;
  if (!operand) {
    keep.push_back(torch::stable::contiguous(t));
    source = &keep.back();
    operand = describe_as(*source);
  }
  operand->data = source->const_data_ptr();
  return *operand;
}

// Describes a (batched) matrix; `keep` receives the one copy made when its strides need it.
MatrixOperand plan_operand(const Tensor& t, std::vector<Tensor>& keep) {
  const int64_t r = t.dim();
  return plan_or_copy(t, keep, [&](const Tensor& x) {
    auto operand = describe(x.size(r - 2), x.size(r - 1), x.stride(r - 2), x.stride(r - 1));
    if (operand && r == 3) operand->batch_stride = x.stride(0);
    return operand;
  });
}

// Whether t's leading dimensions fold into its rows as a view: each (of more than one index) a
// whole number of the next one's extent apart.
bool rows_fold(const Tensor& t) {
  for (int64_t d = 0; d + 2 < t.dim(); ++d)
    if (t.size(d) != 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return false;
  return true;
}

// The rows of t (at least 1-D) with its leading dimensions folded into them.
int64_t folded_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) rows *= t.size(d);
  return rows;
}

// t (at least 1-D) as one matrix: its leading dimensions folded into rows (prod of their sizes by the
// last dimension), read transposed where `transposed`; `keep` receives the one copy made where the
// leading strides do not chain or neither of the matrix's dimensions is unit-stride.
MatrixOperand plan_folded_operand(const Tensor& t, bool transposed, std::vector<Tensor>& keep) {
  return plan_or_copy(t, keep, [&](const Tensor& x) -> std::optional<MatrixOperand> {
    if (!rows_fold(x)) return std::nullopt;
    const int64_t r = x.dim(), rows = folded_rows(x), cols = x.size(r - 1), col_stride = x.stride(r - 1);
    const int64_t row_stride = r >= 2 ? x.stride(r - 2) : cols;
    return transposed ? describe(cols, rows, col_stride, row_stride) : describe(rows, cols, row_stride, col_stride);
  });
}

// Checks the operands and describes them as a problem (c unset); `keep` holds any copies.
GemmProblem prepare(const char* op, const Tensor& a, const Tensor& b, int64_t rank,
                    GemmOptions options, std::vector<Tensor>& keep) {
  check_operands(op, a, b, rank);
  check(options.precision >= 0 && options.precision < kNumPrecisions, [&] {
    return text(op, ": precision code ", options.precision, " is not one of 0 (ieee), 1 (3xtf32), 2 (tf32), 3 (highest)");
  });
  GemmProblem p{};
  p.dtype = a.scalar_type();
  p.batch = rank == 3 ? a.size(0) : 1;
  p.m = a.size(rank - 2);
  p.k = a.size(rank - 1);
  p.n = b.size(rank - 1);
  p.device_index = a.get_device_index();
  p.precision = static_cast<Precision>(options.precision);
  p.tile_override = static_cast<int>(options.tile);
  p.splits_override = options.splits;
  if (p.batch == 0 || p.m == 0 || p.n == 0) return p;
  p.a = plan_operand(a, keep);
  p.b = plan_operand(b, keep);
  return p;
}

// A new contiguous tensor of `shape` with a's dtype, on a's device: allocated through the C shim
// (at::empty_strided) rather than a boxed call of aten::new_empty through the dispatcher, which
// cost ~7k of the operator's ~38k host instructions a call on a CPU (bench/NOTES.md item 166).
Tensor new_output(const Tensor& a, const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size() - 1; d > 0; --d) strides[d - 1] = strides[d] * std::max<int64_t>(shape[d], 1);
  int32_t dtype = 0, device_type = 0, device_index = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(a.get(), &dtype));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(a.get(), &device_type));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(a.get(), &device_index));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(shape.size()), shape.data(),
                                                         strides.data(), dtype, device_type, device_index, &out));
  return Tensor(out);
}

// Runs p (operands described, c unset) into c, a new tensor of p's batch x m x n outputs in some shape,
// with linear's bias (or null) added to every row.
Tensor run_into(GemmProblem& p, Tensor c, const GemmBackend& backend, const Tensor* bias) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return c;
  p.c = c.mutable_data_ptr();
  bool bias_added = false;
  if (bias != nullptr) {
    p.bias = bias->const_data_ptr();
    p.bias_stride = bias->dim() == 1 && bias->size(0) > 1 ? bias->stride(0) : 0;
    p.bias_added = &bias_added;
  }
  backend.run(p);
  if (bias != nullptr && !bias_added) {
    STD_TORCH_CHECK(backend.add_bias != nullptr, "tiledmm: internal error: a kernel left the bias out");
    backend.add_bias(p);
  }
  return c;
}

}  // namespace

Tensor run_gemm(const char* op, const Tensor& a, const Tensor& b, int64_t rank,
                GemmOptions options, const GemmBackend& backend) {
  std::vector<Tensor> keep;
  GemmProblem p = prepare(op, a, b, rank, options, keep);
  std::vector<int64_t> out_shape = {p.m, p.n};
  if (rank == 3) out_shape.insert(out_shape.begin(), p.batch);
  return run_into(p, new_output(a, out_shape), backend, nullptr);
}

Tensor run_gemm_nd(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor* bias, int64_t precision,
                   const GemmBackend& backend) {
  const char* op = "tiledmm.linear";
  check(a.dim() >= 1 && b.dim() >= 1, [&] {
    return text(op, ": expected tensors of at least 1 dimension, got shapes ", shape_of(a), " and ", shape_of(b));
  });
  check_pair(op, a, b);
  check(precision >= 0 && precision < kNumPrecisions, [&] {
    return text(op, ": precision code ", precision, " is not one of 0 (ieee), 1 (3xtf32), 2 (tf32), 3 (highest)");
  });
  const int64_t a_rows = folded_rows(a), a_cols = a.size(a.dim() - 1);
  const int64_t b_rows = folded_rows(b), b_cols = b.size(b.dim() - 1);
  GemmProblem p{};
  p.dtype = a.scalar_type();
  p.batch = 1;
  p.m = ta ? a_cols : a_rows;
  p.k = ta ? a_rows : a_cols;
  p.n = tb ? b_rows : b_cols;
  // The words of its fake kernel (tiledmm/_registrations.py).
  check((tb ? b_cols : b_rows) == p.k, [&] {
    return text(op, ": inner dimensions differ: a of shape ", shape_of(a), ta ? " transposed" : "", " and b of shape ",
                shape_of(b), tb ? " transposed" : "");
  });
  if (bias != nullptr) check_bias(a, *bias, p.n);
  p.device_index = a.get_device_index();
  p.precision = static_cast<Precision>(precision);
  p.tile_override = -1;
  // An N-D a read as rows keeps its leading dimensions in the output: (..., n).
  std::vector<int64_t> out_shape = {p.m, p.n};
  if (a.dim() > 2 && !ta) {
    out_shape.assign(a.dim(), p.n);
    for (int64_t d = 0; d + 1 < a.dim(); ++d) out_shape[d] = a.size(d);
  }
  Tensor c = new_output(a, out_shape);
  std::vector<Tensor> keep;
  if (p.m > 0 && p.n > 0) {
    p.a = plan_folded_operand(a, ta, keep);
    p.b = plan_folded_operand(b, tb, keep);
  }
  return run_into(p, std::move(c), backend, bias);
}

std::string explain_gemm(const char* op, const Tensor& a, const Tensor& b, int64_t rank,
                         GemmOptions options, const GemmBackend& backend) {
  std::vector<Tensor> keep;
  const GemmProblem p = prepare(op, a, b, rank, options, keep);
  std::ostringstream s;
  s << op << ": batch " << p.batch << ", m " << p.m << ", k " << p.k << ", n " << p.n << ", "
    << dtype_of(a) << " on " << device_of(a) << "\n";
  if (p.batch == 0 || p.m == 0 || p.n == 0) {
    s << "empty result: no kernel runs";
    return s.str();
  }
  const Tensor* operands[2] = {&a, &b};
  const MatrixOperand* described[2] = {&p.a, &p.b};
  for (int i = 0; i < 2; ++i) {
    const MatrixOperand& x = *described[i];
    const bool copied = x.data != operands[i]->const_data_ptr();
    s << (i == 0 ? "a" : "b") << ": " << (x.row_major ? "row-major" : "column-major")
      << ", leading dimension " << x.ld << ", batch stride " << x.batch_stride
      << (copied ? " (copied first: neither of its last two dimensions is unit-stride)"
                 : " (read in place)")
      << "\n";
  }
  s << backend.describe(p);
  return s.str();
}

}  // namespace tiledmm
