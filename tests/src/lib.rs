//! Support code shared by the end-to-end tests and the tools in `src/bin`.

pub mod bench;
pub mod fuzzing;
pub mod k8s_sim;
pub mod model_server;
