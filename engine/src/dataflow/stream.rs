//! [`Stream`] and [`KeyedStream`]: the typed builder. Each method attaches an operator to
//! the stream's port on this shard and returns the stream of its output.

use std::{cell::RefCell, collections::VecDeque, hash::Hash, rc::Rc};

use sluice_io::EventTime;

use super::{
    Event, Operator, Output, Port, Progress, Scope,
    checkpoint::Barrier,
    exchange::exchange,
    operator::{Align, Held},
};

/// A stream of `T` on one shard, as the builder sees it.
pub struct Stream<T> {
    pub(crate) scope: Scope,
    pub(crate) port: Port<T>,
    /// The stateful operator or source whose output this is, when the pipeline
    /// checkpoints.
    pub(crate) origin: Option<super::scope::Origin>,
}

impl<T> std::fmt::Debug for Stream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("scope", &self.scope).finish_non_exhaustive()
    }
}

/// Using a stream twice copies its records to each consumer.
impl<T: Clone + 'static> Clone for Stream<T> {
    fn clone(&self) -> Self {
        self.port.borrow_mut().allow_copies();
        Stream { scope: self.scope.clone(), port: self.port.clone(), origin: self.origin }
    }
}

/// An operator with one input and one output that keeps no state across batches: `step`
/// turns each input batch into output records.
struct Stateless<T, U, F> {
    step: F,
    buf: Vec<Event<U>>,
    out: Port<U>,
    _in: std::marker::PhantomData<fn(T)>,
}

impl<T, U: 'static, F: FnMut(&mut Vec<Event<T>>, &mut Vec<Event<U>>)> Operator<T> for Stateless<T, U, F> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        (self.step)(batch, &mut self.buf);
        self.out.borrow_mut().push(&mut self.buf);
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.out.borrow_mut().watermark_to(watermark);
    }
    fn on_idle(&mut self, idle: bool) {
        self.out.borrow_mut().set_idle(idle);
    }
    fn on_end(&mut self) {
        self.out.borrow_mut().end();
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        self.out.borrow_mut().barrier(barrier);
    }
}

/// Calls a function for every record; the end of a stream.
struct ForEach<F>(F);

impl<T, F: FnMut(Event<T>)> Operator<T> for ForEach<F> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        batch.drain(..).for_each(&mut self.0);
    }
    fn on_watermark(&mut self, _: EventTime) {}
    fn on_idle(&mut self, _: bool) {}
    fn on_end(&mut self) {}
}

/// The state a union's inputs share.
struct Union<T> {
    progress: Progress,
    align: Align,
    held: Vec<VecDeque<Held<T>>>,
    out: Port<T>,
}

impl<T: 'static> Union<T> {
    fn apply(&mut self, index: usize, item: Held<T>) {
        match item {
            Held::Batch(mut batch) => {
                self.out.borrow_mut().push(&mut batch);
                return;
            }
            Held::Watermark(w) => self.progress.watermark(index, w),
            Held::Idle(idle) => self.progress.idle(index, idle),
            Held::End => {
                self.progress.end(index);
                if let Some(barrier) = self.align.end(index) {
                    self.release(barrier);
                }
            }
        }
        self.progress.forward(&mut self.out.borrow_mut());
    }

    /// Delivers `item` from input `index`, or holds it while the input is blocked.
    fn deliver(&mut self, index: usize, item: Held<T>) {
        if self.align.blocked(index) {
            self.held[index].push_back(item);
        } else {
            self.apply(index, item);
        }
    }

    /// The alignment completed: pass the barrier on, then what was held, in order.
    fn release(&mut self, barrier: Barrier) {
        self.out.borrow_mut().barrier(barrier);
        for index in 0..self.held.len() {
            while let Some(item) = self.held[index].pop_front() {
                self.apply(index, item);
            }
        }
    }
}

/// One input of a union.
struct UnionInput<T> {
    index: usize,
    state: Rc<RefCell<Union<T>>>,
}

impl<T: 'static> Operator<T> for UnionInput<T> {
    fn on_batch(&mut self, batch: &mut Vec<Event<T>>) {
        let mut state = self.state.borrow_mut();
        if state.align.blocked(self.index) {
            state.held[self.index].push_back(Held::Batch(std::mem::take(batch)));
        } else {
            state.out.borrow_mut().push(batch);
        }
    }
    fn on_watermark(&mut self, watermark: EventTime) {
        self.state.borrow_mut().deliver(self.index, Held::Watermark(watermark));
    }
    fn on_idle(&mut self, idle: bool) {
        self.state.borrow_mut().deliver(self.index, Held::Idle(idle));
    }
    fn on_end(&mut self) {
        self.state.borrow_mut().deliver(self.index, Held::End);
    }
    fn on_barrier(&mut self, barrier: Barrier) {
        let mut state = self.state.borrow_mut();
        if let Some(barrier) = state.align.arrive(self.index, barrier) {
            state.release(barrier);
        }
    }
}

impl<T: 'static> Stream<T> {
    pub(crate) fn from_port(scope: Scope, port: Port<T>, kind: &'static str) -> Self {
        scope.measure(&port, kind);
        Stream { scope, port, origin: None }
    }

    /// Names the operator that makes this stream, for its checkpointed state: a stateful
    /// operator (a window, a join, a process function) stores its state under its uid and
    /// takes back the state stored under that uid, wherever the operator now sits in the
    /// job. So a job may add, remove or reorder operators between a savepoint and its
    /// restore, as long as each stateful operator keeps its uid. An operator without a
    /// uid is matched by its build position among the stateful operators, which any
    /// stateful operator added or removed before it shifts.
    ///
    /// A source's positions are stored by its uid likewise (by its build position among
    /// the sources without one). Stateless operators (`map`, `filter`, ...) accept a uid
    /// too (it names nothing stored). Uids must be unique in a job: a uid given twice fails
    /// [`Pipeline::spawn`](super::Pipeline::spawn) with
    /// [`CheckpointError::DuplicateUid`](super::checkpoint::CheckpointError::DuplicateUid).
    #[must_use]
    pub fn uid(self, uid: &str) -> Self {
        self.scope.give_uid(uid, self.origin);
        self
    }

    /// The scope this stream is built in.
    #[must_use]
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Attaches an operator that turns each input batch into output records with `step`.
    pub fn transform<U: 'static>(
        self,
        step: impl FnMut(&mut Vec<Event<T>>, &mut Vec<Event<U>>) + 'static,
    ) -> Stream<U> {
        let out = Output::port();
        self.port.borrow_mut().attach(Box::new(Stateless {
            step,
            buf: Vec::new(),
            out: out.clone(),
            _in: std::marker::PhantomData,
        }));
        Stream::from_port(self.scope, out, "transform")
    }

    /// Attaches a consumer of this stream's records; the stream ends here.
    pub fn attach(self, operator: impl Operator<T> + 'static) {
        self.port.borrow_mut().attach(Box::new(operator));
    }

    /// Each record mapped by `f`; event times are kept.
    pub fn map<U: 'static>(self, mut f: impl FnMut(T) -> U + 'static) -> Stream<U> {
        self.transform(move |batch, out| out.extend(batch.drain(..).map(|e| Event { time: e.time, value: f(e.value) })))
    }

    /// Each record mapped by `f`, which also sees its event time.
    pub fn map_event<U: 'static>(self, mut f: impl FnMut(Event<T>) -> U + 'static) -> Stream<U> {
        self.transform(move |batch, out| out.extend(batch.drain(..).map(|e| Event { time: e.time, value: f(e) })))
    }

    /// The records for which `keep` is true.
    pub fn filter(self, mut keep: impl FnMut(&T) -> bool + 'static) -> Stream<T> {
        self.transform(move |batch, out| {
            batch.retain(|e| keep(&e.value));
            out.append(batch);
        })
    }

    /// Each record turned into any number of records, all at its event time.
    pub fn flat_map<U: 'static, I: IntoIterator<Item = U>>(self, mut f: impl FnMut(T) -> I + 'static) -> Stream<U> {
        self.transform(move |batch, out| {
            for e in batch.drain(..) {
                let time = e.time;
                out.extend(f(e.value).into_iter().map(|value| Event { time, value }));
            }
        })
    }

    /// The records of both streams; its watermark is the smaller of theirs.
    #[must_use]
    pub fn union(self, other: Stream<T>) -> Stream<T> {
        Self::union_all(vec![self, other])
    }

    /// The records of all `streams`; the watermark is the minimum of theirs.
    ///
    /// # Panics
    ///
    /// If `streams` is empty.
    #[must_use]
    pub fn union_all(streams: Vec<Stream<T>>) -> Stream<T> {
        let scope = streams.first().expect("a union of at least one stream").scope.clone();
        let out = Output::port();
        let n = streams.len();
        let state = Rc::new(RefCell::new(Union {
            progress: Progress::new(n),
            align: Align::new(n),
            held: (0..n).map(|_| VecDeque::new()).collect(),
            out: out.clone(),
        }));
        for (index, stream) in streams.into_iter().enumerate() {
            stream.port.borrow_mut().attach(Box::new(UnionInput { index, state: state.clone() }));
        }
        Stream::from_port(scope, out, "union")
    }

    /// Partitions the stream by key: every record goes to the shard that owns `key(record)`
    /// (through the rings), where the keyed operators that follow keep its key's state.
    ///
    /// Records must be [`Data`](super::Data): an unaligned checkpoint stores the records
    /// in flight through the exchange (std types implement it; derive rkyv's traits and
    /// use [`rkyv_data!`](crate::rkyv_data) for your own).
    pub fn key_by<K, KS>(self, key: KS) -> KeyedStream<K, T, KS>
    where
        T: Send + super::Data,
        K: Hash + Eq + Clone + 'static,
        KS: Fn(&T) -> K + 'static,
    {
        let key = Rc::new(key);
        let port = exchange(&self.scope, &self.port, key.clone());
        KeyedStream { stream: Stream::from_port(self.scope, port, "key_by"), key, _key: std::marker::PhantomData }
    }

    /// Calls `f` for every record, on the shard that holds it: a callback sink.
    pub fn for_each(self, f: impl FnMut(Event<T>) + 'static) {
        self.attach(ForEach(f));
    }

    /// Writes every record to stdout with its `Display`, one line each: the sink for
    /// command-line programs. Lines from different shards interleave, whole.
    pub fn print(self)
    where
        T: std::fmt::Display,
    {
        self.attach(ForEach(|e: Event<T>| println!("{}", e.value)));
    }
}

/// A key selector behind a pointer: the type [`KeyedStream::boxed`] gives, so that a keyed
/// stream's type can be written down.
pub type BoxedKey<T, K> = Box<dyn Fn(&T) -> K>;

/// A stream partitioned by key: each key's records are on the shard that owns the key.
///
/// `KS` is the key selector's type, kept concrete so the keyed operators after it call it
/// inline for every record; [`KeyedStream::boxed`] turns it into the nameable default.
pub struct KeyedStream<K, T, KS = BoxedKey<T, K>> {
    pub(crate) stream: Stream<T>,
    pub(crate) key: Rc<KS>,
    _key: std::marker::PhantomData<fn() -> K>,
}

impl<K, T, KS> std::fmt::Debug for KeyedStream<K, T, KS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedStream").field("scope", &self.stream.scope).finish_non_exhaustive()
    }
}

impl<K: 'static, T: 'static, KS: Fn(&T) -> K + 'static> KeyedStream<K, T, KS> {
    /// The records, no longer seen as keyed (they stay on the shards that own their keys).
    #[must_use]
    pub fn into_stream(self) -> Stream<T> {
        self.stream
    }

    /// The key of a record.
    #[must_use]
    pub fn key_fn(&self) -> Rc<dyn Fn(&T) -> K> {
        self.key.clone()
    }

    /// The same keyed stream with its key selector boxed, so its type can be named
    /// (`KeyedStream<K, T>`), at the cost of a call through a pointer per record.
    #[must_use]
    pub fn boxed(self) -> KeyedStream<K, T> {
        let key = self.key;
        let boxed: BoxedKey<T, K> = Box::new(move |value| key(value));
        KeyedStream { stream: self.stream, key: Rc::new(boxed), _key: std::marker::PhantomData }
    }

    /// The scope this stream is built in.
    #[must_use]
    pub fn scope(&self) -> &Scope {
        &self.stream.scope
    }

    /// Names the exchange that partitions the stream ([`Stream::uid`]). An exchange's
    /// in-flight records (unaligned checkpoints) stay matched by its build position among
    /// the job's exchanges.
    #[must_use]
    pub fn uid(mut self, uid: &str) -> Self {
        self.stream = self.stream.uid(uid);
        self
    }
}
