//! Context for an agent's next step, built on the graph, the search and the
//! branch catalog.

pub mod impact;
