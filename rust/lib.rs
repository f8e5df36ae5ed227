//! memini core.
