//! Reduction operations: the system operations of MPI (including MAXLOC and MINLOC) and user
//! operations, commutative or not.
//!
//! Every operation combines two buffers as MPI does: `inout[i] = in[i] ∘ inout[i]`, where `in`
//! holds the contribution of the lower ranks. Non-commutative operations are therefore applied
//! in rank order by the algorithms that use them.

use crate::datatype::{Buffer, BufferMut, UncommittedDatatype};
use crate::datatype::{DynBuffer, DynBufferMut, Primitive, TypeMap};
use crate::Count;
use std::fmt;

/// A reduction operation (named by a raw `MPI_Op` handle, as in rsmpi).
pub trait Operation: crate::raw::AsRaw<Raw = crate::handles::MPI_Op> {
    /// Whether `a ∘ b = b ∘ a`.
    fn is_commutative(&self) -> bool;

    /// Combines `count` packed elements of `map`: `inout = input ∘ inout`. Not part of
    /// rsmpi's API.
    #[doc(hidden)]
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]);
}

impl<T: Operation + ?Sized> Operation for &T {
    fn is_commutative(&self) -> bool {
        (**self).is_commutative()
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        (**self).combine(map, count, input, inout)
    }
}

/// The operations MPI defines.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SystemOperation(SysOp);

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum SysOp {
    Max,
    Min,
    Sum,
    Product,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    MaxLoc,
    MinLoc,
}

impl SystemOperation {
    /// Maximum.
    pub fn max() -> Self {
        SystemOperation(SysOp::Max)
    }
    /// Minimum.
    pub fn min() -> Self {
        SystemOperation(SysOp::Min)
    }
    /// Sum (integers wrap on overflow).
    pub fn sum() -> Self {
        SystemOperation(SysOp::Sum)
    }
    /// Product (integers wrap on overflow).
    pub fn product() -> Self {
        SystemOperation(SysOp::Product)
    }
    /// Logical and (non-zero is true).
    pub fn logical_and() -> Self {
        SystemOperation(SysOp::LogicalAnd)
    }
    /// Logical or.
    pub fn logical_or() -> Self {
        SystemOperation(SysOp::LogicalOr)
    }
    /// Logical exclusive or.
    pub fn logical_xor() -> Self {
        SystemOperation(SysOp::LogicalXor)
    }
    /// Bitwise and (integers and `bool`).
    pub fn bitwise_and() -> Self {
        SystemOperation(SysOp::BitwiseAnd)
    }
    /// Bitwise or.
    pub fn bitwise_or() -> Self {
        SystemOperation(SysOp::BitwiseOr)
    }
    /// Bitwise exclusive or.
    pub fn bitwise_xor() -> Self {
        SystemOperation(SysOp::BitwiseXor)
    }
    /// MAXLOC (not in rsmpi): on (value, index) pairs — any datatype whose element is a value
    /// followed by an index, such as `#[derive(Equivalence)] struct { value: f64, index: i32 }`
    /// — keeps the largest value and, among equal values, the smallest index.
    pub fn max_loc() -> Self {
        SystemOperation(SysOp::MaxLoc)
    }
    /// MINLOC (not in rsmpi): like [`SystemOperation::max_loc`] with the smallest value.
    pub fn min_loc() -> Self {
        SystemOperation(SysOp::MinLoc)
    }
}

// SAFETY: each operation has its predefined handle.
unsafe impl crate::raw::AsRaw for SystemOperation {
    type Raw = crate::handles::MPI_Op;
    fn as_raw(&self) -> crate::handles::MPI_Op {
        use crate::handles::predefined::*;
        use crate::handles::{OP_MAXLOC, OP_MINLOC};
        match self.0 {
            SysOp::Max => RSMPI_MAX,
            SysOp::Min => RSMPI_MIN,
            SysOp::Sum => RSMPI_SUM,
            SysOp::Product => RSMPI_PROD,
            SysOp::LogicalAnd => RSMPI_LAND,
            SysOp::LogicalOr => RSMPI_LOR,
            SysOp::LogicalXor => RSMPI_LXOR,
            SysOp::BitwiseAnd => RSMPI_BAND,
            SysOp::BitwiseOr => RSMPI_BOR,
            SysOp::BitwiseXor => RSMPI_BXOR,
            SysOp::MaxLoc => OP_MAXLOC,
            SysOp::MinLoc => OP_MINLOC,
        }
    }
}

impl Operation for SystemOperation {
    fn is_commutative(&self) -> bool {
        true
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        let n = (count * map.size()).min(input.len()).min(inout.len());
        let (input, inout) = (&input[..n], &mut inout[..n]);
        match self.0 {
            SysOp::MaxLoc | SysOp::MinLoc => loc(self.0, map, count, input, inout),
            op => {
                if let Some(k) = map.homogeneous() {
                    apply(op, k, input, inout);
                } else {
                    // Element by element, block by block over the packed layout.
                    let mut pos = 0;
                    for _ in 0..count {
                        for b in map.blocks() {
                            apply(op, b.kind, &input[pos..pos + b.len], &mut inout[pos..pos + b.len]);
                            pos += b.len;
                        }
                    }
                }
            }
        }
    }
}

macro_rules! rd {
    ($t:ty, $s:expr, $i:expr) => {
        <$t>::from_le_bytes(
            $s[$i * std::mem::size_of::<$t>()..($i + 1) * std::mem::size_of::<$t>()].try_into().unwrap(),
        )
    };
}

macro_rules! each {
    ($t:ty, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {{
        let sz = std::mem::size_of::<$t>();
        for (ca, cb) in $a.chunks_exact(sz).zip($b.chunks_exact_mut(sz)) {
            let $x = <$t>::from_le_bytes(ca.try_into().unwrap());
            let $y = <$t>::from_le_bytes((&*cb).try_into().unwrap());
            let r: $t = $e;
            cb.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

macro_rules! int_ops {
    ($op:expr, $t:ty, $a:expr, $b:expr) => {
        match $op {
            SysOp::Max => each!($t, $a, $b, |x, y| x.max(y)),
            SysOp::Min => each!($t, $a, $b, |x, y| x.min(y)),
            SysOp::Sum => each!($t, $a, $b, |x, y| x.wrapping_add(y)),
            SysOp::Product => each!($t, $a, $b, |x, y| x.wrapping_mul(y)),
            SysOp::LogicalAnd => each!($t, $a, $b, |x, y| ((x != 0) && (y != 0)) as $t),
            SysOp::LogicalOr => each!($t, $a, $b, |x, y| ((x != 0) || (y != 0)) as $t),
            SysOp::LogicalXor => each!($t, $a, $b, |x, y| ((x != 0) != (y != 0)) as $t),
            SysOp::BitwiseAnd => each!($t, $a, $b, |x, y| x & y),
            SysOp::BitwiseOr => each!($t, $a, $b, |x, y| x | y),
            SysOp::BitwiseXor => each!($t, $a, $b, |x, y| x ^ y),
            SysOp::MaxLoc | SysOp::MinLoc => unreachable!(),
        }
    };
}

macro_rules! float_ops {
    ($op:expr, $t:ty, $a:expr, $b:expr, $name:expr) => {
        match $op {
            SysOp::Max => each!($t, $a, $b, |x, y| if x > y { x } else { y }),
            SysOp::Min => each!($t, $a, $b, |x, y| if x < y { x } else { y }),
            SysOp::Sum => each!($t, $a, $b, |x, y| x + y),
            SysOp::Product => each!($t, $a, $b, |x, y| x * y),
            SysOp::LogicalAnd => each!($t, $a, $b, |x, y| ((x != 0.0) && (y != 0.0)) as u8 as $t),
            SysOp::LogicalOr => each!($t, $a, $b, |x, y| ((x != 0.0) || (y != 0.0)) as u8 as $t),
            SysOp::LogicalXor => each!($t, $a, $b, |x, y| ((x != 0.0) != (y != 0.0)) as u8 as $t),
            op => undefined(op, $name),
        }
    };
}

fn undefined(op: SysOp, ty: &str) -> ! {
    crate::error::fatal(&crate::error::Error::Operation(format!("{op:?} is not defined on {ty}")))
}

fn apply(op: SysOp, kind: Primitive, a: &[u8], b: &mut [u8]) {
    match kind {
        Primitive::I8 => int_ops!(op, i8, a, b),
        Primitive::U8 => int_ops!(op, u8, a, b),
        Primitive::I16 => int_ops!(op, i16, a, b),
        Primitive::U16 => int_ops!(op, u16, a, b),
        Primitive::I32 => int_ops!(op, i32, a, b),
        Primitive::U32 => int_ops!(op, u32, a, b),
        Primitive::I64 => int_ops!(op, i64, a, b),
        Primitive::U64 => int_ops!(op, u64, a, b),
        Primitive::I128 => int_ops!(op, i128, a, b),
        Primitive::U128 => int_ops!(op, u128, a, b),
        Primitive::F32 => float_ops!(op, f32, a, b, "f32"),
        Primitive::F64 => float_ops!(op, f64, a, b, "f64"),
        Primitive::Bool => match op {
            SysOp::Max | SysOp::LogicalOr | SysOp::BitwiseOr => each!(u8, a, b, |x, y| ((x | y) != 0) as u8),
            SysOp::Min | SysOp::LogicalAnd | SysOp::BitwiseAnd => each!(u8, a, b, |x, y| ((x & y) != 0) as u8),
            SysOp::LogicalXor | SysOp::BitwiseXor => each!(u8, a, b, |x, y| ((x ^ y) != 0) as u8),
            op => undefined(op, "bool"),
        },
        Primitive::C32 => complex!(op, f32, a, b, "complex f32"),
        Primitive::C64 => complex!(op, f64, a, b, "complex f64"),
        Primitive::F80 => match op {
            SysOp::Sum => each_of(a, b, 16, x87::add),
            SysOp::Product => each_of(a, b, 16, x87::mul),
            SysOp::Max => each_of(a, b, 16, |x, y| {
                if x87::compare(x, y) == Some(std::cmp::Ordering::Greater) {
                    y.copy_from_slice(x);
                }
            }),
            SysOp::Min => each_of(a, b, 16, |x, y| {
                if x87::compare(x, y) == Some(std::cmp::Ordering::Less) {
                    y.copy_from_slice(x);
                }
            }),
            op => undefined(op, "long double"),
        },
        Primitive::C80 => match op {
            SysOp::Sum => each_of(a, b, 16, x87::add),
            SysOp::Product => each_of(a, b, 32, x87::complex_mul),
            op => undefined(op, "complex long double"),
        },
    }
}

/// `f(input, inout)` on each `size`-byte element of `a` and `b`.
fn each_of(a: &[u8], b: &mut [u8], size: usize, f: impl Fn(&[u8], &mut [u8])) {
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact_mut(size)) {
        f(x, y);
    }
}

/// C's `long double` on x86_64 (x87's 80-bit extended format in 16 bytes, little-endian, the
/// last 6 bytes padding), computed exactly as a C program computes it: by the x87 unit
/// (`fld`/`fstp` of 10 bytes, `faddp`, `fmulp`, `fucomip`), with its 64-bit significand and the
/// rounding to nearest Linux sets. No Rust type holds such a value, hence the assembly.
#[cfg(target_arch = "x86_64")]
mod x87 {
    use std::arch::asm;
    use std::cmp::Ordering;

    /// `y = x + y` (16 bytes each).
    pub(super) fn add(x: &[u8], y: &mut [u8]) {
        assert!(x.len() >= 16 && y.len() >= 16, "a long double has 16 bytes");
        // SAFETY: `x` and `y` hold 16 bytes each (checked), of which `fld`/`fstp` of a tbyte
        // read and write the first 10; every x87 register is declared clobbered, so the
        // register stack is empty on entry, and it is empty again on exit (two loads, one
        // popping add, one popping store).
        unsafe {
            asm!(
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y}]",
                "faddp st(1), st",
                "fstp tbyte ptr [{y}]",
                x = in(reg) x.as_ptr(),
                y = in(reg) y.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            );
        }
    }

    /// `y = x * y` (16 bytes each).
    pub(super) fn mul(x: &[u8], y: &mut [u8]) {
        assert!(x.len() >= 16 && y.len() >= 16, "a long double has 16 bytes");
        // SAFETY: as in `add`, with a popping multiplication.
        unsafe {
            asm!(
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y}]",
                "fmulp st(1), st",
                "fstp tbyte ptr [{y}]",
                x = in(reg) x.as_ptr(),
                y = in(reg) y.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            );
        }
    }

    /// `y = x * y` of two complex numbers (real part then imaginary part, 32 bytes each):
    /// `(xr yr - xi yi, xr yi + xi yr)`, every intermediate in 80 bits (the subtraction as
    /// the addition of a negated product, which is exact the same).
    pub(super) fn complex_mul(x: &[u8], y: &mut [u8]) {
        assert!(x.len() >= 32 && y.len() >= 32, "a complex long double has 32 bytes");
        // SAFETY: `x` and `y` hold 32 bytes each (checked): tbytes at offsets 0 and 16 are
        // read, and written in `y` only after every read; the x87 stack holds at most four
        // values, empty on entry (all registers clobbered) and on exit (two popping stores
        // after the last popping addition).
        unsafe {
            asm!(
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y}]",
                "fmulp st(1), st",
                "fld tbyte ptr [{x} + 16]",
                "fld tbyte ptr [{y} + 16]",
                "fmulp st(1), st",
                "fchs",
                "faddp st(1), st",
                "fld tbyte ptr [{x}]",
                "fld tbyte ptr [{y} + 16]",
                "fmulp st(1), st",
                "fld tbyte ptr [{x} + 16]",
                "fld tbyte ptr [{y}]",
                "fmulp st(1), st",
                "faddp st(1), st",
                "fstp tbyte ptr [{y} + 16]",
                "fstp tbyte ptr [{y}]",
                x = in(reg) x.as_ptr(),
                y = in(reg) y.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack),
            );
        }
    }

    /// How `x` compares with `y` (16 bytes each; `None`: unordered, a NaN).
    pub(super) fn compare(x: &[u8], y: &[u8]) -> Option<Ordering> {
        assert!(x.len() >= 16 && y.len() >= 16, "a long double has 16 bytes");
        let (above, below, equal, unordered): (u8, u8, u8, u8);
        // SAFETY: `x` and `y` hold 16 bytes each (checked), of which 10 are read; the stack
        // (empty on entry, all x87 registers clobbered) holds two values, one popped by the
        // comparison, the other by `fstp st(0)`: empty on exit. The flags are read at once.
        unsafe {
            asm!(
                "fld tbyte ptr [{y}]",
                "fld tbyte ptr [{x}]",
                "fucomip st, st(1)",
                "fstp st(0)",
                "seta {above}",
                "setb {below}",
                "sete {equal}",
                "setp {unordered}",
                x = in(reg) x.as_ptr(),
                y = in(reg) y.as_ptr(),
                above = out(reg_byte) above,
                below = out(reg_byte) below,
                equal = out(reg_byte) equal,
                unordered = out(reg_byte) unordered,
                out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
                out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
                options(nostack, readonly),
            );
        }
        match (unordered, above, below, equal) {
            (1, ..) => None,
            (_, 1, _, _) => Some(Ordering::Greater),
            (_, _, 1, _) => Some(Ordering::Less),
            _ => {
                debug_assert_eq!(equal, 1);
                Some(Ordering::Equal)
            }
        }
    }
}

/// C's `long double` elsewhere than on x86_64: its data is sent and received as 16 bytes,
/// but the reductions on it are refused (this library computes it with x87 instructions).
#[cfg(not(target_arch = "x86_64"))]
mod x87 {
    use super::{undefined, SysOp};
    use std::cmp::Ordering;

    const WHY: &str = "long double (80-bit arithmetic exists on x86_64 only)";

    pub(super) fn add(_: &[u8], _: &mut [u8]) {
        undefined(SysOp::Sum, WHY)
    }
    pub(super) fn mul(_: &[u8], _: &mut [u8]) {
        undefined(SysOp::Product, WHY)
    }
    pub(super) fn complex_mul(_: &[u8], _: &mut [u8]) {
        undefined(SysOp::Product, WHY)
    }
    pub(super) fn compare(_: &[u8], _: &[u8]) -> Option<Ordering> {
        undefined(SysOp::Max, WHY)
    }
}

macro_rules! complex {
    ($op:expr, $t:ty, $a:expr, $b:expr, $name:expr) => {{
        let sz = 2 * std::mem::size_of::<$t>();
        match $op {
            SysOp::Sum => each!($t, $a, $b, |x, y| x + y),
            SysOp::Product => {
                for (ca, cb) in $a.chunks_exact(sz).zip($b.chunks_exact_mut(sz)) {
                    let (ar, ai) = (rd!($t, ca, 0), rd!($t, ca, 1));
                    let (br, bi) = (rd!($t, cb, 0), rd!($t, cb, 1));
                    let (r, i) = (ar * br - ai * bi, ar * bi + ai * br);
                    let h = sz / 2;
                    cb[..h].copy_from_slice(&r.to_le_bytes());
                    cb[h..].copy_from_slice(&i.to_le_bytes());
                }
            }
            op => undefined(op, $name),
        }
    }};
}
use complex;

/// A comparable scalar read from any primitive kind.
#[derive(PartialEq, PartialOrd, Clone, Copy)]
enum Scalar {
    I(i128),
    U(u128),
    F(f64),
}

fn scalar(kind: Primitive, b: &[u8]) -> Scalar {
    match kind {
        Primitive::Bool | Primitive::U8 => Scalar::U(b[0] as u128),
        Primitive::I8 => Scalar::I(b[0] as i8 as i128),
        Primitive::I16 => Scalar::I(rd!(i16, b, 0) as i128),
        Primitive::U16 => Scalar::U(rd!(u16, b, 0) as u128),
        Primitive::I32 => Scalar::I(rd!(i32, b, 0) as i128),
        Primitive::U32 => Scalar::U(rd!(u32, b, 0) as u128),
        Primitive::I64 => Scalar::I(rd!(i64, b, 0) as i128),
        Primitive::U64 => Scalar::U(rd!(u64, b, 0) as u128),
        Primitive::I128 => Scalar::I(rd!(i128, b, 0)),
        Primitive::U128 => Scalar::U(rd!(u128, b, 0)),
        Primitive::F32 => Scalar::F(rd!(f32, b, 0) as f64),
        Primitive::F64 => Scalar::F(rd!(f64, b, 0)),
        _ => undefined(SysOp::MaxLoc, "complex values"),
    }
}

/// How values `a` and `b` of kind `kind` compare (`None`: unordered, a NaN).
fn compare(kind: Primitive, a: &[u8], b: &[u8]) -> Option<std::cmp::Ordering> {
    if kind == Primitive::F80 {
        return x87::compare(a, b);
    }
    scalar(kind, a).partial_cmp(&scalar(kind, b))
}

/// MAXLOC / MINLOC over (value, index) elements of the packed layout.
fn loc(op: SysOp, map: &TypeMap, count: usize, a: &[u8], b: &mut [u8]) {
    // The element is a value then an index: two blocks, or one block of two equal halves.
    let (vk, vlen, ik, ilen) = match map.blocks() {
        [v, i] => (v.kind, v.len, i.kind, i.len),
        [one] if one.len == 2 * one.kind.size() => (one.kind, one.kind.size(), one.kind, one.kind.size()),
        _ => crate::error::fatal(&crate::error::Error::Operation(
            "max_loc/min_loc need a datatype whose element is a (value, index) pair".into(),
        )),
    };
    let sz = vlen + ilen;
    for i in 0..count {
        let (ea, eb) = (&a[i * sz..(i + 1) * sz], &mut b[i * sz..(i + 1) * sz]);
        let by_value = compare(vk, &ea[..vlen], &eb[..vlen]);
        let (ia, ib) = (scalar(ik, &ea[vlen..]), scalar(ik, &eb[vlen..]));
        let better = match op {
            SysOp::MaxLoc => by_value == Some(std::cmp::Ordering::Greater),
            _ => by_value == Some(std::cmp::Ordering::Less),
        };
        if better || (by_value == Some(std::cmp::Ordering::Equal) && ia < ib) {
            eb.copy_from_slice(ea);
        }
    }
}

/// A user-defined operation: a closure called as `f(input, inout)`, which must set
/// `inout[i] = input[i] ∘ inout[i]` (input holds the lower ranks' contribution).
pub struct UserOperation<'a> {
    commutes: bool,
    body: Body<'a>,
    /// What `from_raw` was given to keep alive with the operation.
    _anchor: Option<Box<dyn Erased + 'a>>,
}

/// Anything, kept alive by a [`UserOperation`] made by `from_raw`.
trait Erased {}
impl<T: ?Sized> Erased for T {}

/// A user operation's closure.
pub(crate) type Closure<'a> = dyn Fn(DynBuffer, DynBufferMut) + Sync + 'a;

enum Body<'a> {
    Closure(Box<Closure<'a>>),
    /// Made by `from_raw` of this handle.
    Raw(crate::handles::MPI_Op, super::handles::AnyOp),
}

/// A user operation's closure, named by a raw handle (its lifetime erased: the handle is
/// only valid while the operation lives, and forgotten when it is dropped).
#[derive(Clone, Copy)]
pub(crate) struct ClosureRef {
    pub(crate) f: *const Closure<'static>,
    pub(crate) commutes: bool,
}

// SAFETY: the closure is `Sync`; the pointer is only dereferenced (shared) while the
// operation it belongs to lives, which its handle's user vouches for.
unsafe impl Send for ClosureRef {}
// SAFETY: as above.
unsafe impl Sync for ClosureRef {}

// SAFETY: the handle names this closure (see `ClosureRef`).
unsafe impl crate::raw::AsRaw for ClosureRef {
    type Raw = crate::handles::MPI_Op;
    fn as_raw(&self) -> crate::handles::MPI_Op {
        super::handles::closure_op_to_raw(*self)
    }
}

impl Operation for ClosureRef {
    fn is_commutative(&self) -> bool {
        self.commutes
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        // SAFETY: the handle of this closure is live, so the operation (and its closure) is
        // (the contract of the ffi functions that take it).
        combine_closure(unsafe { &*self.f }, map, count, input, inout)
    }
}

impl Drop for UserOperation<'_> {
    fn drop(&mut self) {
        if let Body::Closure(f) = &self.body {
            super::handles::forget_closure_op(&**f as *const Closure<'_> as *const () as usize);
        }
    }
}

// SAFETY: the handle names this operation's closure while it lives (forgotten at its drop),
// or is the handle it was made from.
unsafe impl crate::raw::AsRaw for UserOperation<'_> {
    type Raw = crate::handles::MPI_Op;
    fn as_raw(&self) -> crate::handles::MPI_Op {
        match &self.body {
            Body::Closure(f) => {
                let p: *const Closure<'_> = &**f;
                // SAFETY: only the lifetime is erased (same layout); see `ClosureRef`.
                let f = unsafe { std::mem::transmute::<*const Closure<'_>, *const Closure<'static>>(p) };
                super::handles::closure_op_to_raw(ClosureRef { f, commutes: self.commutes })
            }
            Body::Raw(h, _) => *h,
        }
    }
}

impl fmt::Debug for UserOperation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOperation").field("commutes", &self.commutes).finish_non_exhaustive()
    }
}

impl<'a> UserOperation<'a> {
    /// An associative, non-commutative operation: applied in rank order.
    pub fn associative<F>(function: F) -> Self
    where
        F: Fn(DynBuffer, DynBufferMut) + Sync + 'a,
    {
        Self::new(false, function)
    }
    /// An associative and commutative operation.
    pub fn commutative<F>(function: F) -> Self
    where
        F: Fn(DynBuffer, DynBufferMut) + Sync + 'a,
    {
        Self::new(true, function)
    }
    /// An operation, commutative if `commute`.
    pub fn new<F>(commute: bool, function: F) -> Self
    where
        F: Fn(DynBuffer, DynBufferMut) + Sync + 'a,
    {
        UserOperation { commutes: commute, body: Body::Closure(Box::new(function)), _anchor: None }
    }

    /// The operation `op` names (a predefined one, one made by `MPI_Op_create`, or another
    /// operation's `as_raw`), keeping `anchor` alive with it.
    ///
    /// # Safety
    /// `op` must name a live operation (not `RSMPI_OP_NULL`; panics on an unknown handle),
    /// which must outlive the new one.
    pub unsafe fn from_raw<T: 'a>(op: crate::handles::MPI_Op, anchor: Box<T>) -> Self {
        let any =
            super::handles::op_of(op).unwrap_or_else(|| panic!("UserOperation::from_raw: {op:?} names no operation"));
        let commutes = any.is_commutative();
        UserOperation { commutes, body: Body::Raw(op, any), _anchor: Some(anchor) }
    }
}

/// Runs a closure on `count` packed elements of `map`: `inout = input ∘ inout`.
fn combine_closure(f: &Closure<'_>, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
    // The closure sees typed slices in the native layout.
    in_native(map, count, input, inout, |pa, pb| {
        let dt = crate::datatype::DatatypeRef::from_map(map);
        let n = Count::try_from(count).expect("reduction of more elements than a Count holds");
        // SAFETY: `pa` holds `count` elements of `map`, initialised (zeroed, then data
        // unpacked: valid for any `Equivalence` type of this layout, `bool` data as 0 or 1);
        // `x` lives only for the call of the closure below, while that memory is not touched.
        let x = unsafe { DynBuffer::from_raw(pa as *const u8, n, dt) };
        // SAFETY: the same for `pb`, a separate allocation, accessed only through `y` during
        // the call; whatever the closure stores through `y` is a valid element.
        let y = unsafe { DynBufferMut::from_raw(pb, n, dt) };
        f(x, y);
    });
}

/// `inout = input ∘ inout` by `op` on the native layout: both operands unpacked into aligned
/// memory (`op` gets the bases of the input's and the in-out's `count` elements), the result
/// packed back into `inout`. For user operations, which see typed memory.
fn in_native(map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8], op: impl FnOnce(*mut u8, *mut u8)) {
    let mut a = Native::zeroed(map, count);
    let mut b = Native::zeroed(map, count);
    let (pa, pb) = (a.base(), b.base());
    // SAFETY: `Native::zeroed` sized each memory so that every data block of the `count`
    // elements from its base lies inside it, writable; any bytes are valid in a `u128`.
    unsafe {
        map.unpack(input, pa, count);
        map.unpack(inout, pb, count);
    }
    op(pa, pb);
    let mut out = Vec::with_capacity(inout.len());
    // SAFETY: `b` holds `count` initialised elements of `map` from `pb` (unpacked above, then
    // written by `op` with elements of the layout).
    unsafe { map.pack(pb, count, &mut out) };
    inout[..out.len()].copy_from_slice(&out);
}

/// Zeroed, 16-byte aligned scratch memory holding `count` elements of a layout in their
/// native form, for user operations (which see typed slices). The first element's base is
/// `front` bytes in, so that every data block of every element lies inside the memory,
/// whatever the offsets of the blocks (negative ones included) and the extent.
struct Native {
    words: Vec<u128>,
    front: usize,
}

impl Native {
    fn zeroed(map: &TypeMap, count: usize) -> Native {
        let (mut lo, mut hi) = (0isize, 0isize);
        if count > 0 {
            for b in map.blocks() {
                let last = (count as isize - 1) * map.extent();
                lo = lo.min(b.offset).min(b.offset + last);
                hi = hi.max(b.offset + b.len as isize).max(b.offset + b.len as isize + last);
            }
        }
        // `-lo` rounded up to the alignment of the memory, so the base stays 16-aligned.
        let front = ((-lo) as usize).next_multiple_of(16);
        let len = front + hi as usize;
        Native { words: vec![0u128; len.div_ceil(16).max(1)], front }
    }
    /// The base of the first element.
    fn base(&mut self) -> *mut u8 {
        // `front` is inside the allocation: the memory is `front + hi` bytes long, hi >= 0.
        self.words.as_mut_ptr().cast::<u8>().wrapping_add(self.front)
    }
}

impl Operation for UserOperation<'_> {
    fn is_commutative(&self) -> bool {
        self.commutes
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        match &self.body {
            Body::Closure(f) => combine_closure(&**f, map, count, input, inout),
            Body::Raw(_, op) => op.combine(map, count, input, inout),
        }
    }
}

/// The C signature of a user function of [`UnsafeUserOperation`] (`MPI_User_function`):
/// `f(invec, inoutvec, len, datatype)` must set `inoutvec[i] = invec[i] ∘ inoutvec[i]` for the
/// `*len` elements.
pub type UnsafeUserFunction = unsafe extern "C" fn(
    *mut std::os::raw::c_void,
    *mut std::os::raw::c_void,
    *mut Count,
    *mut crate::handles::MPI_Datatype,
);

/// A user operation given as a C function pointer (rsmpi's `UnsafeUserOperation`). The
/// function sees the elements in their native layout (aligned, as in the program's memory),
/// `*len` of them, and an opaque datatype handle.
#[derive(Clone, Copy)]
pub struct UnsafeUserOperation {
    commutes: bool,
    function: UnsafeUserFunction,
}

impl fmt::Debug for UnsafeUserOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnsafeUserOperation").field(&(self.function as *const ())).finish()
    }
}

impl UnsafeUserOperation {
    /// An associative operation, applied in rank order.
    ///
    /// # Safety
    /// `function` must be sound to call on any buffers of the datatypes the operation is used
    /// with, and implement an associative operation.
    pub unsafe fn associative(function: UnsafeUserFunction) -> Self {
        // SAFETY: the caller's contract is `new`'s.
        unsafe { Self::new(false, function) }
    }
    /// An associative and commutative operation.
    ///
    /// # Safety
    /// As for [`Self::associative`]; the operation must also be commutative.
    pub unsafe fn commutative(function: UnsafeUserFunction) -> Self {
        // SAFETY: the caller's contract is `new`'s.
        unsafe { Self::new(true, function) }
    }
    /// An operation, commutative if `commute`.
    ///
    /// # Safety
    /// As for [`Self::associative`].
    pub unsafe fn new(commute: bool, function: UnsafeUserFunction) -> Self {
        UnsafeUserOperation { commutes: commute, function }
    }
}

impl UnsafeUserOperation {
    pub(crate) fn function(&self) -> UnsafeUserFunction {
        self.function
    }
    pub(crate) fn is_commutative_flag(&self) -> bool {
        self.commutes
    }
}

// SAFETY: the handle names an operation with the same function and commutativity, for the
// whole run (operations are plain data).
unsafe impl crate::raw::AsRaw for UnsafeUserOperation {
    type Raw = crate::handles::MPI_Op;
    fn as_raw(&self) -> crate::handles::MPI_Op {
        super::handles::op_to_raw(self)
    }
}

impl Operation for UnsafeUserOperation {
    fn is_commutative(&self) -> bool {
        self.commutes
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        in_native(map, count, input, inout, |pa, pb| {
            let mut len = Count::try_from(count).expect("reduction of more elements than a Count holds");
            let mut handle = crate::handles::MPI_Datatype::of(map);
            // SAFETY: the constructor's caller vouched that the function is sound on buffers
            // of this datatype; `pa` and `pb` hold `count` initialised elements in native
            // layout (separate allocations, alive for the call), `len` and `handle` are live
            // locals.
            unsafe { (self.function)(pa.cast(), pb.cast(), &mut len, &mut handle) };
        });
    }
}

/// Combines locally: `inoutbuf = inbuf ∘ inoutbuf` (MPI_Reduce_local).
pub fn reduce_local_into<S: ?Sized, R: ?Sized, O>(inbuf: &S, inoutbuf: &mut R, op: O)
where
    S: Buffer,
    R: BufferMut,
    O: Operation,
{
    let dt = inbuf.as_datatype();
    let map = dt.type_map().clone();
    let count = inbuf.count().max(0) as usize;
    // Both buffers are walked with `inbuf`'s layout and count, as MPI_Reduce_local does: they
    // must be `inoutbuf`'s too, or the walk would leave its memory.
    let out_dt = inoutbuf.as_datatype();
    let out_map = out_dt.type_map();
    assert!(
        inoutbuf.count() == inbuf.count()
            && out_map.blocks() == map.blocks()
            && (out_map.lb(), out_map.extent()) == (map.lb(), map.extent()),
        "reduce_local_into: the two buffers differ in count or datatype"
    );
    let mut a = Vec::new();
    let mut b = Vec::new();
    // SAFETY: `Buffer`'s and `BufferMut`'s contracts: each pointer is readable for `count`
    // initialised elements of `map` (checked to be the layout and count of both buffers).
    unsafe {
        map.pack(inbuf.pointer() as *const u8, count, &mut a);
        map.pack(inoutbuf.pointer_mut() as *const u8, count, &mut b);
    }
    op.combine(&map, count, &a, &mut b);
    // SAFETY: `BufferMut`'s contract: writable for those `count` elements, valid for any bytes
    // of the layout (`bool` data is unpacked as 0 or 1).
    unsafe { map.unpack(&b, inoutbuf.pointer_mut() as *mut u8, count) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{Equivalence, UserDatatype};

    /// The 16 bytes of the x87 extended float `2^e` (biased exponent, explicit integer bit),
    /// plus `2^(e - 63) * low` of its significand's lowest bits.
    fn f80(e: i32, low: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&((1u64 << 63) | low).to_le_bytes());
        b[8..10].copy_from_slice(&((0x3fff + e) as u16).to_le_bytes());
        b
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn long_doubles_reduce_in_80_bits() {
        let map = TypeMap::primitive(Primitive::F80);
        // 1 + 2^-60: lost in a double (53 bits), kept in 64 bits of significand.
        let (one, tiny) = (f80(0, 0), f80(-60, 0));
        let mut acc = one;
        SystemOperation::sum().combine(&map, 1, &tiny, &mut acc);
        assert_eq!(acc, f80(0, 8), "1 + 2^-60 exactly");
        SystemOperation::sum().combine(&map, 1, &tiny, &mut acc);
        assert_eq!(acc, f80(0, 16));
        // (1 + 2^-60) * 2 = 2 + 2^-59; max and min by value.
        let mut p = f80(1, 0);
        SystemOperation::product().combine(&map, 1, &acc, &mut p);
        assert_eq!(p, f80(1, 16));
        let mut m = one;
        SystemOperation::max().combine(&map, 1, &acc, &mut m);
        assert_eq!(m, acc, "1 + 2^-59 > 1");
        SystemOperation::min().combine(&map, 1, &one, &mut m);
        assert_eq!(m, one);
        // Complex: (1 + 2^-60 i)(1 + 2^-60 i) = (1 - 2^-120) + 2^-59 i, whose real part rounds
        // to 1 (far below half a unit of the last of 64 bits).
        let c = [one, tiny].concat();
        let mut d = c.clone();
        SystemOperation::product().combine(&TypeMap::primitive(Primitive::C80), 1, &c, &mut d);
        assert_eq!(&d[16..], &f80(-59, 0), "imaginary part 2^-59");
        assert_eq!(&d[..16], &one, "real part 1 - 2^-120 rounds to 1");
        // MAXLOC on (long double, int) pairs: the larger value, the lower index on a tie.
        let pair = |v: [u8; 16], i: i32| [&v[..], &i.to_le_bytes()].concat();
        let (v, i) = (UserDatatype::primitive(Primitive::F80), UserDatatype::primitive(Primitive::I32));
        let pm = UserDatatype::structured(&[1, 1], &[0, 16], &[v.as_ref(), i.as_ref()]);
        let pm = pm.type_map();
        assert_eq!((pm.size(), pm.extent()), (20, 32), "padded to a long double's alignment");
        let mut b = pair(one, 0);
        SystemOperation::max_loc().combine(pm, 1, &pair(acc, 3), &mut b);
        assert_eq!(b, pair(acc, 3));
        SystemOperation::max_loc().combine(pm, 1, &pair(acc, 1), &mut b);
        assert_eq!(b, pair(acc, 1), "a tie takes the lower index");
        SystemOperation::min_loc().combine(pm, 1, &pair(one, 5), &mut b);
        assert_eq!(b, pair(one, 5));
    }

    fn bytes<T: Copy + Equivalence>(v: &[T]) -> Vec<u8> {
        let mut out = Vec::new();
        // SAFETY: `v` holds `v.len()` initialised `T`s, which `T`'s datatype describes.
        unsafe { T::equivalent_datatype().type_map().pack(v.as_ptr() as *const u8, v.len(), &mut out) };
        out
    }
    fn back<T: Copy + Default + Equivalence>(b: &[u8]) -> Vec<T> {
        let map = T::equivalent_datatype().type_map().clone();
        let mut v = vec![T::default(); b.len() / map.size()];
        // SAFETY: `v` holds `v.len()` writable `T`s; `unpack` writes valid bytes for them.
        unsafe { map.unpack(b, v.as_mut_ptr() as *mut u8, v.len()) };
        v
    }
    fn run<T: Copy + Default + Equivalence>(op: SystemOperation, a: &[T], b: &[T]) -> Vec<T> {
        let map = T::equivalent_datatype().type_map().clone();
        let mut out = bytes(b);
        op.combine(&map, a.len(), &bytes(a), &mut out);
        back(&out)
    }

    #[test]
    fn integer_operations_wrap_and_combine_elementwise() {
        assert_eq!(run(SystemOperation::sum(), &[i32::MAX, 2], &[1, 3]), vec![i32::MIN, 5]);
        assert_eq!(run(SystemOperation::product(), &[3u8, 200], &[5, 2]), vec![15, 144]);
        assert_eq!(run(SystemOperation::max(), &[-1i64, 7], &[-2, 9]), vec![-1, 9]);
        assert_eq!(run(SystemOperation::min(), &[5u16, 1], &[4, 2]), vec![4, 1]);
        assert_eq!(run(SystemOperation::bitwise_xor(), &[0b1100u64], &[0b1010]), vec![0b0110]);
        assert_eq!(run(SystemOperation::logical_and(), &[2i32, 0], &[3, 5]), vec![1, 0]);
        assert_eq!(run(SystemOperation::logical_xor(), &[true, true], &[false, true]), vec![true, false]);
    }

    #[test]
    fn float_operations() {
        assert_eq!(run(SystemOperation::sum(), &[1.5f64, -2.0], &[2.0, 0.5]), vec![3.5, -1.5]);
        assert_eq!(run(SystemOperation::max(), &[1.5f32], &[2.0]), vec![2.0]);
    }

    #[repr(C)]
    #[derive(Copy, Clone, Default, Debug, PartialEq)]
    struct ValIdx {
        v: f64,
        i: i32,
    }

    #[test]
    fn max_loc_and_min_loc_keep_the_smallest_index_on_ties() {
        let t = UserDatatype::structured(&[1, 1], &[0, 8], &[f64::equivalent_datatype(), i32::equivalent_datatype()]);
        let map = t.type_map().clone();
        let pack = |v: &[ValIdx]| {
            let mut out = Vec::new();
            // SAFETY: `v` holds `v.len()` initialised `ValIdx`, the layout of `map`.
            unsafe { map.pack(v.as_ptr() as *const u8, v.len(), &mut out) };
            out
        };
        let a = [ValIdx { v: 3.0, i: 7 }, ValIdx { v: 1.0, i: 2 }, ValIdx { v: 5.0, i: 4 }];
        let b = [ValIdx { v: 3.0, i: 9 }, ValIdx { v: 2.0, i: 1 }, ValIdx { v: 5.0, i: 1 }];
        let mut out = pack(&b);
        SystemOperation::max_loc().combine(&map, 3, &pack(&a), &mut out);
        let mut res = [ValIdx::default(); 3];
        // SAFETY: `res` holds 3 writable `ValIdx`; any bytes are valid for them.
        unsafe { map.unpack(&out, res.as_mut_ptr() as *mut u8, 3) };
        assert_eq!(res, [ValIdx { v: 3.0, i: 7 }, ValIdx { v: 2.0, i: 1 }, ValIdx { v: 5.0, i: 1 }]);
        let mut out = pack(&b);
        SystemOperation::min_loc().combine(&map, 3, &pack(&a), &mut out);
        // SAFETY: as above.
        unsafe { map.unpack(&out, res.as_mut_ptr() as *mut u8, 3) };
        assert_eq!(res, [ValIdx { v: 3.0, i: 7 }, ValIdx { v: 1.0, i: 2 }, ValIdx { v: 5.0, i: 1 }]);
    }

    #[test]
    fn user_operation_sees_typed_slices_in_order() {
        // Non-commutative: string-like concatenation of digits, inout = in ∘ inout.
        let op = UserOperation::associative(|x: DynBuffer, y: DynBufferMut| {
            let x = x.downcast::<u64>().unwrap();
            let y = y.downcast::<u64>().unwrap();
            for (a, b) in x.iter().zip(y.iter_mut()) {
                *b += a * 10;
            }
        });
        assert!(!op.is_commutative());
        let mut inout = [2u64, 5];
        reduce_local_into(&[1u64, 4][..], &mut inout[..], &op);
        assert_eq!(inout, [12, 45]);
        assert!(DynBuffer::new(&[1u32][..]).downcast::<i32>().is_none(), "u32 is not i32");
    }

    #[test]
    fn user_operation_on_a_layout_with_a_negative_offset_stays_in_its_memory() {
        // One u64 8 bytes *before* each element's base: the native copies given to the
        // closure must reach below the base (run under valgrind by bench/valgrind.sh).
        let t = UserDatatype::heterogeneous_indexed(&[1], &[-8], &u64::equivalent_datatype());
        let map = t.type_map().clone();
        assert!(map.blocks()[0].offset < 0);
        let op = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
            assert_eq!((x.len(), y.len()), (3, 3));
            assert!(x.downcast::<u64>().is_none(), "not u64's layout");
        });
        let input = bytes(&[1u64, 2, 3]);
        let mut inout = bytes(&[4u64, 5, 6]);
        op.combine(&map, 3, &input, &mut inout);
        assert_eq!(back::<u64>(&inout), vec![4, 5, 6], "the closure changed nothing");
    }

    #[test]
    fn user_operation_sees_valid_bools() {
        let op = UserOperation::commutative(|x: DynBuffer, y: DynBufferMut| {
            let x = x.downcast::<bool>().unwrap();
            for (a, b) in x.iter().zip(y.downcast::<bool>().unwrap()) {
                *b = *a && *b;
            }
        });
        let mut inout = vec![1u8, 2, 0];
        op.combine(bool::equivalent_datatype().type_map(), 3, &[7, 1, 1], &mut inout);
        assert_eq!(inout, [1, 1, 0], "bytes other than 0 and 1 reach the closure as true");
    }

    #[test]
    #[should_panic(expected = "differ in count or datatype")]
    fn reduce_local_into_refuses_buffers_of_another_layout() {
        let mut small = [0u8; 2];
        reduce_local_into(&[1u64, 2][..], &mut small[..], SystemOperation::sum());
    }
}
