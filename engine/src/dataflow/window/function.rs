//! What a window computes: [`Aggregate`] (incremental: one accumulator per key and window)
//! and the internal [`WindowFunction`] the window operators drive, which also covers
//! `reduce` and `process` (which keeps the window's records).

use std::marker::PhantomData;

use super::Window;
use crate::dataflow::Event;

/// An incremental aggregation, as Flink's `AggregateFunction`: each record is folded into
/// its window's accumulator as it arrives, so a window holds one accumulator per key, not
/// its records.
pub trait Aggregate<T>: 'static {
    /// The running state of one key's window.
    type Acc: 'static;
    /// The result a window emits.
    type Out: 'static;
    /// An empty accumulator.
    fn create(&self) -> Self::Acc;
    /// Folds one record in.
    fn add(&self, acc: &mut Self::Acc, value: &T);
    /// Merges `from` into `into`: session windows merge when a record bridges them.
    fn merge(&self, into: &mut Self::Acc, from: Self::Acc);
    /// The window's result.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// Counts records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Count;

impl<T> Aggregate<T> for Count {
    type Acc = u64;
    type Out = u64;
    fn create(&self) -> u64 {
        0
    }
    #[inline]
    fn add(&self, acc: &mut u64, _: &T) {
        *acc += 1;
    }
    fn merge(&self, into: &mut u64, from: u64) {
        *into += from;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// What a window operator drives: create, add, merge, and produce a result for a key's
/// window.
pub(crate) trait WindowFunction<K, T>: 'static {
    type Acc: 'static;
    type Out: 'static;
    fn create(&mut self) -> Self::Acc;
    fn add(&mut self, acc: &mut Self::Acc, event: &Event<T>);
    fn merge(&mut self, into: &mut Self::Acc, from: Self::Acc);
    fn result(&mut self, key: &K, window: &Window, acc: &Self::Acc) -> Self::Out;
}

/// An [`Aggregate`] as a window function.
pub(crate) struct AggregateFn<A>(pub(crate) A);

impl<K, T, A: Aggregate<T>> WindowFunction<K, T> for AggregateFn<A> {
    type Acc = A::Acc;
    type Out = A::Out;
    fn create(&mut self) -> A::Acc {
        self.0.create()
    }
    #[inline]
    fn add(&mut self, acc: &mut A::Acc, event: &Event<T>) {
        self.0.add(acc, &event.value);
    }
    fn merge(&mut self, into: &mut A::Acc, from: A::Acc) {
        self.0.merge(into, from);
    }
    fn result(&mut self, _: &K, _: &Window, acc: &A::Acc) -> A::Out {
        self.0.result(acc)
    }
}

/// `reduce`: the accumulator is the reduction so far.
pub(crate) struct ReduceFn<T, F>(pub(crate) F, pub(crate) PhantomData<fn(T)>);

impl<K, T: Clone + 'static, F: FnMut(&T, &T) -> T + 'static> WindowFunction<K, T> for ReduceFn<T, F> {
    type Acc = Option<T>;
    type Out = T;
    fn create(&mut self) -> Option<T> {
        None
    }
    fn add(&mut self, acc: &mut Option<T>, event: &Event<T>) {
        *acc = Some(match acc.take() {
            Some(so_far) => (self.0)(&so_far, &event.value),
            None => event.value.clone(),
        });
    }
    fn merge(&mut self, into: &mut Option<T>, from: Option<T>) {
        if let Some(from) = from {
            *into = Some(match into.take() {
                Some(so_far) => (self.0)(&so_far, &from),
                None => from,
            });
        }
    }
    fn result(&mut self, _: &K, _: &Window, acc: &Option<T>) -> T {
        acc.clone().expect("a window exists only once a record is in it")
    }
}

/// `process`: the window keeps its records, and the function sees them all at once.
pub(crate) struct ProcessFn<T, F>(pub(crate) F, pub(crate) PhantomData<fn(T)>);

impl<K, T: Clone + 'static, R: 'static, F: FnMut(&K, &Window, &[Event<T>]) -> R + 'static> WindowFunction<K, T>
    for ProcessFn<T, F>
{
    type Acc = Vec<Event<T>>;
    type Out = R;
    fn create(&mut self) -> Vec<Event<T>> {
        Vec::new()
    }
    fn add(&mut self, acc: &mut Vec<Event<T>>, event: &Event<T>) {
        acc.push(event.clone());
    }
    fn merge(&mut self, into: &mut Vec<Event<T>>, mut from: Vec<Event<T>>) {
        into.append(&mut from);
    }
    fn result(&mut self, key: &K, window: &Window, acc: &Vec<Event<T>>) -> R {
        (self.0)(key, window, acc)
    }
}
