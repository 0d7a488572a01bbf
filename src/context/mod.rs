//! Context for an agent's next step, built on the graph, the search and the
//! branch catalog: what a question needs, what an edit needs, what a change
//! affects, where to start. [`pack`] fits each into a token budget.

pub mod impact;
pub mod map;
pub mod pack;
pub mod question;
pub mod symbol;
