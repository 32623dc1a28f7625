//! Estimate the GPU memory a PyTorch training (or inference) run will need,
//! before running it: from a parameter count or a Hugging Face style
//! `config.json`, the precision, the optimizer and the batch shape.
//!
//! * [`config`] reads `config.json` into a [`ModelConfig`];
//! * [`params`] counts the parameters (with a breakdown);
//! * [`activations`] models the activation memory (structural and empirical);
//! * [`options`] says what to estimate ([`EstimateOptions`], with defaults);
//! * [`formula`] puts the components together into an [`Estimate`]
//!   ([`result`]): peak, phase, whether it fits a GPU, the largest batch
//!   that does;
//! * [`text`] renders it for the terminal.
//!
//! ```
//! use vramscope_estimate::{estimate, Dtype, EstimateOptions, Optimizer};
//!
//! let e = estimate(&EstimateOptions {
//!     params: Some(1_000_000_000),
//!     dtype: Dtype::Fp32,
//!     optimizer: Optimizer::AdamW,
//!     ..EstimateOptions::default()
//! })
//! .unwrap();
//! assert_eq!(e.components.parameters, 4_000_000_000);
//! assert_eq!(e.components.gradients, 4_000_000_000);
//! assert_eq!(e.components.optimizer_state, 8_000_000_000);
//! assert_eq!(e.components.optimizer_intermediates, 4_000_000_000);
//! println!("{}", vramscope_estimate::render(&e));
//! ```

pub mod activations;
pub mod config;
pub mod formula;
pub mod options;
pub mod params;
pub mod result;
pub mod text;

pub use config::{ConfigError, MlpKind, ModelConfig, NormKind};
pub use formula::{estimate, total_at_batch};
pub use options::{Dtype, EstimateError, EstimateOptions, Optimizer};
pub use params::{count_params, parse_param_count, ParamBreakdown};
pub use result::{ActivationModel, Components, Estimate, Phase};
pub use text::render;
