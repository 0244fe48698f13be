//! Appending short byte strings to a buffer.

/// Appends `bytes` to `buf`. From 4 to 32 bytes are copied inline with two
/// overlapping loads and stores of 4, 8 or 16 bytes (no `memcpy` call): the
/// fields, keys and lengths a record is framed from are mostly that short,
/// and the call and its size dispatch cost more than the copy.
#[inline]
pub(crate) fn extend_small(buf: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if !(4..=32).contains(&n) {
        buf.extend_from_slice(bytes);
        return;
    }
    buf.reserve(n);
    let len = buf.len();
    let src = bytes.as_ptr();
    // SAFETY: `reserve` made room for n bytes after `len`; `bytes` is a
    // shared borrow, so it is not `buf`'s memory. Each load reads inside
    // `bytes` (n >= the load's width) and each store writes inside the n
    // reserved bytes; the two copies (from the start, and ending at the
    // end) overlap when n is under twice the width, covering all n bytes.
    unsafe {
        let dst = buf.as_mut_ptr().add(len);
        if n > 16 {
            let (a, b) = (
                src.cast::<u128>().read_unaligned(),
                src.add(n - 16).cast::<u128>().read_unaligned(),
            );
            dst.cast::<u128>().write_unaligned(a);
            dst.add(n - 16).cast::<u128>().write_unaligned(b);
        } else if n >= 8 {
            let (a, b) = (
                src.cast::<u64>().read_unaligned(),
                src.add(n - 8).cast::<u64>().read_unaligned(),
            );
            dst.cast::<u64>().write_unaligned(a);
            dst.add(n - 8).cast::<u64>().write_unaligned(b);
        } else {
            let (a, b) = (
                src.cast::<u32>().read_unaligned(),
                src.add(n - 4).cast::<u32>().read_unaligned(),
            );
            dst.cast::<u32>().write_unaligned(a);
            dst.add(n - 4).cast::<u32>().write_unaligned(b);
        }
        buf.set_len(len + n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_every_length_as_extend_from_slice_does() {
        let source: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        for prefix in [0, 1, 7, 13] {
            for n in 0..=source.len() {
                let mut buf: Vec<u8> = (0..prefix).map(|i| 200 + i).collect();
                let mut expected = buf.clone();
                extend_small(&mut buf, &source[..n]);
                expected.extend_from_slice(&source[..n]);
                assert_eq!(buf, expected, "prefix {prefix}, {n} bytes");
            }
        }
    }
}
