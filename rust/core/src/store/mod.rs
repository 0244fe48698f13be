//! Native state stores.
