//! Describing a checkpoint for tools: operators, states, kinds, sizes and raw entries.
