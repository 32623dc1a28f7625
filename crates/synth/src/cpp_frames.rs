//! C++ frames of `stacks="all"` recordings: the caching allocator and
//! dispatcher under an allocation, the tensor destructors under a free,
//! the CPython interpreter between Python frames, and the autograd engine
//! thread under backward work. Names follow what libtorch builds show
//! (`"??"` where the unwinder found no file).

use crate::sites::{Owned, T};

const ARGS: &str = "(at::Tensor const&, at::Tensor const&)";

fn s(name: &str, file: &'static str) -> Owned {
    (name.to_string(), file, 0)
}

pub(crate) fn owned(frames: &[T]) -> Vec<Owned> {
    frames
        .iter()
        .map(|&(n, f, l)| (n.to_string(), f, l))
        .collect()
}

/// Frames common to every recorded stack: the traceback capture itself.
fn capture() -> Vec<Owned> {
    vec![
        s("torch::unwind::unwind()", "??"),
        s("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
        s(
            "torch::cuda::(anonymous namespace)::gather_with_cpp()",
            "memory_snapshot.cpp",
        ),
    ]
}

/// Allocation of the output of ATen op `op`, then `rest` (its caller).
pub(crate) fn alloc(op: &str, rest: Vec<Owned>) -> Vec<Owned> {
    let cca = "c10::cuda::CUDACachingAllocator::Native";
    let mut v = capture();
    v.extend([
        s(&format!("{cca}::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"), "CUDACachingAllocator.cpp"),
        s(&format!("{cca}::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)"), ""),
        s(&format!("{cca}::NativeCachingAllocator::allocate(unsigned long)"), ""),
        s("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)", "??"),
        s("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)", "??"),
        s("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", "??"),
        s("at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)", "RegisterCUDA_0.cpp"),
        s(&format!("at::(anonymous namespace)::structured_{op}_out_functional::set_output_raw_strided(long, c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions, c10::ArrayRef<at::Dimname>)"), "RegisterCUDA_0.cpp"),
        s(&format!("at::(anonymous namespace)::wrapper_CUDA_{op}{ARGS}"), "RegisterCUDA_0.cpp"),
        s(&format!("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor {ARGS}, &at::(anonymous namespace)::wrapper_CUDA_{op}>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&, at::Tensor const&> >, at::Tensor {ARGS}>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"), "RegisterCUDA_0.cpp"),
        s(&format!("at::_ops::{op}::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"), "??"),
        s(&format!("torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)"), "VariableType_2.cpp"),
        s(&format!("at::_ops::{op}::call{ARGS}"), "??"),
    ]);
    v.extend(rest);
    v
}

/// Release of a tensor's storage, then `rest` (what dropped the tensor).
pub(crate) fn free(rest: Vec<Owned>) -> Vec<Owned> {
    let cca = "c10::cuda::CUDACachingAllocator::Native";
    let mut v = capture();
    v.extend([
        s(&format!("{cca}::DeviceCachingAllocator::free({cca}::(anonymous namespace)::Block*)"), "CUDACachingAllocator.cpp"),
        s(&format!("{cca}::local_raw_delete(void*)"), "CUDACachingAllocator.cpp"),
        s("c10::StorageImpl::~StorageImpl()", ""),
        s("c10::intrusive_ptr<c10::StorageImpl, c10::detail::intrusive_target_default_null_type<c10::StorageImpl> >::reset_()", ""),
        s("c10::TensorImpl::~TensorImpl()", "??"),
        s("c10::TensorImpl::~TensorImpl() [clone .localalias]", "TensorImpl.cpp"),
    ]);
    v.extend(rest);
    v
}

/// Python frames with the interpreter frames between them, then the
/// interpreter's start-up frames.
pub(crate) fn interleave(python: &[T]) -> Vec<Owned> {
    let mut v = Vec::new();
    for &(name, file, line) in python {
        v.push((name.to_string(), file, line));
        match name {
            "_call_impl" => {}
            "_wrapped_call_impl" => {
                v.push(("_PyObject_MakeTpCall".into(), "{py}/Objects/call.c", 240))
            }
            _ => v.push((
                "_PyEval_EvalFrameDefault".into(),
                "{py}/Python/ceval.c",
                4769,
            )),
        }
    }
    v.pop();
    v.extend(
        [
            ("PyEval_EvalCode", "{py}/Python/ceval.c", 1148),
            ("run_eval_code_obj", "{py}/Python/pythonrun.c", 1741),
            ("run_mod", "{py}/Python/pythonrun.c", 1762),
            ("pyrun_file", "{py}/Python/pythonrun.c", 1657),
            ("_PyRun_SimpleFileObject", "{py}/Python/pythonrun.c", 440),
            ("_PyRun_AnyFileObject", "{py}/Python/pythonrun.c", 79),
            ("pymain_run_file_obj", "{py}/Modules/main.c", 360),
            ("Py_BytesMain", "{py}/Modules/main.c", 734),
            ("__libc_start_call_main", "??", 0),
            ("__libc_start_main_impl", "??", 0),
            ("_start", "??", 0),
        ]
        .map(|(n, f, l)| (n.to_string(), f, l)),
    );
    v
}

/// A Python-level call of ATen op `op` (`torch.op(...)` / `Tensor.op`).
pub(crate) fn python_entry(op: &str, python: Vec<Owned>) -> Vec<Owned> {
    let mut v = vec![
        s(
            &format!("torch::autograd::THPVariable_{op}(_object*, _object*, _object*)"),
            "python_torch_functions_0.cpp",
        ),
        ("cfunction_call".into(), "{py}/Objects/methodobject.c", 548),
        ("_PyObject_MakeTpCall".into(), "{py}/Objects/call.c", 240),
    ];
    v.extend(python);
    v
}

/// The last reference of a tensor dropped by Python code.
pub(crate) fn python_free(python: Vec<Owned>) -> Vec<Owned> {
    let mut v = vec![
        s(
            "THPVariable_subclass_dealloc(_object*)",
            "python_variable.cpp",
        ),
        ("_Py_Dealloc".into(), "{py}/Objects/object.c", 2390),
    ];
    v.extend(python);
    v
}

/// The autograd engine thread running node `node`: as the caller of an
/// allocation, or (`freeing`) releasing the node's saved tensors.
pub(crate) fn engine(node: &str, freeing: bool) -> Vec<Owned> {
    let node = if node.contains("::") {
        node.to_string()
    } else {
        format!("torch::autograd::generated::{node}")
    };
    let ag = "torch::autograd";
    let vec_t = "std::vector<at::Tensor, std::allocator<at::Tensor> >";
    let mut v = if freeing {
        vec![
            s(
                &format!("{ag}::SavedVariable::reset_data()"),
                "saved_variable.cpp",
            ),
            s(&format!("{node}::release_variables()"), "Functions.h"),
        ]
    } else {
        vec![
            s(&format!("{node}::apply({vec_t}&&)"), "Functions.cpp"),
            s(&format!("{ag}::Node::operator()({vec_t}&&)"), ""),
            s(&format!("{ag}::call_function(std::shared_ptr<{ag}::GraphTask>&, {ag}::Node*, {ag}::InputBuffer&)"), "engine.cpp"),
        ]
    };
    v.extend([
        s(&format!("{ag}::Engine::evaluate_function(std::shared_ptr<{ag}::GraphTask>&, {ag}::Node*, {ag}::InputBuffer&, std::shared_ptr<{ag}::ReadyQueue> const&)"), "??"),
        s(&format!("{ag}::Engine::thread_main(std::shared_ptr<{ag}::GraphTask> const&)"), "??"),
        s(&format!("{ag}::Engine::thread_init(int, std::shared_ptr<{ag}::ReadyQueue> const&, bool)"), "??"),
        s(&format!("{ag}::python::PythonEngine::thread_init(int, std::shared_ptr<{ag}::ReadyQueue> const&, bool)"), ""),
        s("execute_native_thread_routine", "thread48.o"),
        s("start_thread", "??"),
        s("__clone3", "??"),
    ]);
    v
}
