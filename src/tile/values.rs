//! `ValuesOut`: the caller's buffer of decoded counts, shared by decoding and exception
//! patching (its own module, so that neither imports the other).

/// Where decoded counts go: int32 or float32 (exact up to 2^24).
pub enum ValuesOut<'a> {
    I32(&'a mut [i32]),
    F32(&'a mut [f32]),
}

impl<'a> ValuesOut<'a> {
    pub fn len(&self) -> usize {
        match self {
            ValuesOut::I32(v) => v.len(),
            ValuesOut::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Splits off the first `n` values; `self` keeps the rest.
    pub(super) fn take_front(&mut self, n: usize) -> ValuesOut<'a> {
        match self {
            ValuesOut::I32(v) => {
                let (a, b) = std::mem::take(v).split_at_mut(n);
                *v = b;
                ValuesOut::I32(a)
            }
            ValuesOut::F32(v) => {
                let (a, b) = std::mem::take(v).split_at_mut(n);
                *v = b;
                ValuesOut::F32(a)
            }
        }
    }
}
