//! The switch a model library gives for checkpointing its own layers.
//!
//! Where the repeated blocks are a library's (a Hugging Face model's
//! decoder layers, a diffusers UNet's, a timm model's), the loop that calls
//! them is in the library's code, which the user does not edit: the code
//! to write is the library's switch, not a `checkpoint(block, h)` loop. The
//! library is read from the recorder's module map (`vramscope.modules`):
//! the file that defines the blocks' class.

use vramscope_snapshot::Snapshot;

/// A library whose models carry their own checkpointing switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Library {
    Transformers,
    Diffusers,
    Timm,
}

/// The library that defines the blocks called `name` (`model.layers.3`),
/// by the file of their class in the module map; `None` for the program's
/// own blocks, blocks read from the stacks, or a file without a map.
pub(super) fn library_of(snap: &Snapshot, name: &str) -> Option<Library> {
    let rows = &snap.source.recorder.as_ref()?.modules;
    let path = grouped(name);
    let row = rows.iter().find(|r| r.path == path)?;
    let file = row.file.replace('\\', "/");
    [
        ("/transformers/", Library::Transformers),
        ("/diffusers/", Library::Diffusers),
        ("/timm/", Library::Timm),
    ]
    .into_iter()
    .find(|(dir, _)| file.contains(dir))
    .map(|(_, lib)| lib)
}

/// `model.layers.3` as the module map groups it: `model.layers[*]`.
fn grouped(name: &str) -> String {
    let mut out = String::new();
    for part in name.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("[*]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// The code that turns the library's checkpointing on for every block
/// (`k`: the first `k` only, where the library can say so), `container`
/// the Python that reaches the blocks (`model.model.layers`).
pub(super) fn switch_code(lib: Library, container: &str, k: Option<usize>) -> Option<String> {
    match (lib, k) {
        (Library::Transformers, None) => Some(
            "# transformers' own switch: each of its layers checkpointed (the outermost where they nest), its KV \
             cache off\n\
             model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={\"use_reentrant\": False})\n\
             # (transformers 5: model.activation_checkpointing_enable(), use_reentrant=False by default)"
                .to_owned(),
        ),
        // Each layer's own flag, read at every call: the first k alone.
        (Library::Transformers, Some(k)) => Some(format!(
            "# transformers' own switch, then each layer's flag: the first {k} checkpointed\n\
             model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={{\"use_reentrant\": False}})\n\
             for i, block in enumerate({container}):\n    block.gradient_checkpointing = i < {k}"
        )),
        (Library::Diffusers, None) => Some(
            "# diffusers' own switch: every block that supports it checkpointed\n\
             model.enable_gradient_checkpointing()"
                .to_owned(),
        ),
        (Library::Timm, None) => Some(
            "# timm's own switch: the model's blocks (or stages) checkpointed\n\
             model.set_grad_checkpointing(True)"
                .to_owned(),
        ),
        // Neither switch takes a count: the loop in the library's forward.
        (Library::Diffusers | Library::Timm, Some(_)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names_are_grouped_as_the_module_map() {
        assert_eq!(
            grouped("base_model.model.transformer.h.0"),
            "base_model.model.transformer.h[*]"
        );
        assert_eq!(grouped("layers.12.mlp"), "layers[*].mlp");
        assert_eq!(grouped("3"), "[*]");
    }

    #[test]
    fn the_first_k_are_each_layers_flag_in_transformers_only() {
        let code = switch_code(Library::Transformers, "model.model.layers", Some(3)).expect("code");
        assert!(code.contains("for i, block in enumerate(model.model.layers):\n    block.gradient_checkpointing = i < 3"));
        assert!(switch_code(Library::Timm, "model.blocks", Some(3)).is_none());
        assert!(switch_code(Library::Timm, "model.blocks", None)
            .is_some_and(|c| c.contains("set_grad_checkpointing(True)")));
    }
}
