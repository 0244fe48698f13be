//! The native windowed-aggregation kernels (`strom_core::window`) for
//! Python: `NativeTimeWindowedAggregation`, `NativeSlidingWindowedAggregation`
//! and `NativeSessionWindowedAggregation`, each one processor's state over
//! count, sum, min, max or mean of `int` (Java `long`) or `float` (Java
//! `double`) values.
//!
//! A call carries a whole batch as columns and returns columns:
//! - keys: a list of `bytes | None` (the serialized keys), or Arrow's
//!   `Binary` layout as a tuple `(data, offsets[, validity])` of `bytes`
//!   (offsets packed as native-endian int32, validity an LSB-first bitmap);
//! - timestamps: a list of `int`, or `bytes` of packed native-endian int64;
//! - values: None (a count), a list of `int | float | None` (or of dicts
//!   with `field` given: the value is `value.get(field)`), or `bytes` of
//!   packed native-endian int64 / float64 without nulls.
//!
//! Packed `bytes` are read in place (no copy) when aligned. The loop runs
//! detached from the interpreter. Results stay native until a column is
//! asked for, as a list or, with `packed=True`, as native-endian `bytes`
//! (`memoryview(b).cast("q")` reads them without a copy).

mod aggregations;
mod columns;
mod kernels;
mod results;

use aggregations::{
    NativeSessionWindowedAggregation, NativeSlidingWindowedAggregation,
    NativeTimeWindowedAggregation,
};
pub(crate) use results::NativeWindowedResults;

use pyo3::prelude::*;

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeTimeWindowedAggregation>()?;
    m.add_class::<NativeSlidingWindowedAggregation>()?;
    m.add_class::<NativeSessionWindowedAggregation>()?;
    m.add_class::<NativeWindowedResults>()?;
    Ok(())
}
