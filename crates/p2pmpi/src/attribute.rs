//! Communicator attributes (rsmpi's `mpi::attribute`): a value of any type implementing
//! [`CommAttribute`] can be attached to a communicator, one per type, and read back with
//! `get_attr`/`set_attr` ([`crate::topology::AnyCommunicator`]). A duplicate of the
//! communicator gets a clone of the values whose type says `CLONE_ON_DUP`.
//!
//! Unlike rsmpi, attribute types must be `Send + Sync` (a communicator may be used from any
//! thread). A value replaced by `set_attr` is kept until the communicator is freed (a
//! reference from `get_attr` may still point to it).

use std::any::{Any, TypeId};
use std::collections::HashMap;

/// A type that can be attached to a communicator as an attribute.
pub trait CommAttribute
where
    Self: 'static + Sized + Clone + Send + Sync,
{
    /// Whether `duplicate` copies the attribute (by `clone`) into the new communicator.
    const CLONE_ON_DUP: bool = false;
}

/// Re-exports for `use mpi::attribute::traits::*`.
pub mod traits {
    pub use super::CommAttribute;
}

pub(crate) trait AttrValue: Any + Send + Sync {
    fn duplicate(&self) -> Option<Box<dyn AttrValue>>;
    fn as_any(&self) -> &dyn Any;
}

impl<A: CommAttribute> AttrValue for A {
    fn duplicate(&self) -> Option<Box<dyn AttrValue>> {
        A::CLONE_ON_DUP.then(|| Box::new(self.clone()) as Box<dyn AttrValue>)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The attributes of one communicator.
#[derive(Default)]
pub(crate) struct Attributes {
    values: HashMap<TypeId, Box<dyn AttrValue>>,
    /// Replaced values, freed with the communicator.
    replaced: Vec<Box<dyn AttrValue>>,
}

impl std::fmt::Debug for Attributes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Attributes({})", self.values.len())
    }
}

impl Attributes {
    pub fn set<A: CommAttribute>(&mut self, val: A) {
        if let Some(old) = self.values.insert(TypeId::of::<A>(), Box::new(val)) {
            self.replaced.push(old);
        }
    }
    /// The address of the value of type `A`, stable until the communicator is freed.
    pub fn get<A: CommAttribute>(&self) -> Option<*const A> {
        let v = self.values.get(&TypeId::of::<A>())?;
        v.as_any().downcast_ref::<A>().map(|a| a as *const A)
    }
    /// The attributes a duplicate gets.
    pub fn for_duplicate(&self) -> Attributes {
        let values = self.values.iter().filter_map(|(k, v)| v.duplicate().map(|d| (*k, d))).collect();
        Attributes { values, replaced: Vec::new() }
    }
}
