//! The training run: parameters moved to the device, then per iteration
//! `zero_grad`, forward and backward over each micro-batch, and an AdamW
//! step (state allocated on the first step). Every tensor goes through the
//! simulated allocator and every allocator call becomes trace entries.

use crate::allocator::{round_size, Allocator};
use crate::model::{Model, Rng};
use crate::sites::{Site, Site::*};
use crate::stacks::Stacks;
use crate::trace::{Action, Event, Sink};
use crate::SynthOptions;
use std::collections::HashSet;

/// `torch.cuda.get_device_properties().total_memory` of an 80 GB H100.
const DEVICE_MEMORY: u64 = 85_520_809_984;
/// Device memory used outside the allocator (CUDA context, cuBLAS).
const OUTSIDE_ALLOCATOR: u64 = 600 << 20;
const FIRST_TIME_US: u64 = 1_750_000_000_000_000;

/// A tensor; `None` when the run ran out of entries before creating it.
type Tensor = Option<u64>;

/// What the second pass needs to measure the bytes live when the trace
/// window starts: where it starts and which allocations live to the end.
pub(crate) struct WindowProbe<'a> {
    pub start: u64,
    pub live_at_end: &'a HashSet<u64>,
}

pub(crate) struct Run<'a, S: Sink> {
    pub alloc: Allocator,
    rng: Rng,
    stacks: &'a Stacks,
    sink: &'a mut S,
    model: Model,
    leak: u64,
    oom: bool,
    limit: u64,
    count: u64,
    time: u64,
    ctx: u64,
    finishing: bool,
    done: bool,
    probe: Option<WindowProbe<'a>>,
    /// Bytes live when the window starts (allocations that live to the end
    /// count their block size, the others their requested size).
    pub start_live: u64,
    pub leaked: u64,
}

impl<'a, S: Sink> Run<'a, S> {
    /// The run of device `device`; its seed decides everything.
    pub(crate) fn new(
        opts: &SynthOptions,
        device: u32,
        stacks: &'a Stacks,
        sink: &'a mut S,
        probe: Option<WindowProbe<'a>>,
    ) -> Self {
        let entries = opts.device_entries(device);
        let mut rng = Rng::new(opts.device_seed(device));
        let model = Model::for_entries(entries, opts.iterations, &mut rng);
        let base = 0x7f00_0000_0000 - device as u64 * 0x80_0000_0000 + rng.below(2048) * (2 << 20);
        Run {
            alloc: Allocator::new(base, opts.expandable_segments),
            time: FIRST_TIME_US + rng.below(20_000_000_000_000) + device as u64 * rng.below(1000),
            rng,
            stacks,
            sink,
            model,
            leak: opts.leak_bytes_per_iter,
            oom: opts.oom,
            limit: entries,
            count: 0,
            ctx: 0,
            finishing: false,
            done: false,
            probe,
            start_live: 0,
            leaked: 0,
        }
    }

    /// Runs to the end of the entries; returns how many were produced.
    pub(crate) fn execute(&mut self) -> u64 {
        let sizes = self.model.param_sizes();
        let params: Vec<Tensor> = sizes.iter().map(|&s| self.malloc(s, ParamInit)).collect();
        let mut grads: Vec<Tensor> = vec![None; params.len()];
        let mut state: Vec<Tensor> = Vec::new();
        let mut it = 1;
        while !self.done && !self.finishing {
            self.tick(5_000, 40_000);
            self.sink.annotation(it, true, self.time);
            for g in grads.iter_mut() {
                self.free(g.take(), ZeroGrad);
            }
            for m in 0..self.model.micro {
                self.micro_batch(m == 0, &sizes, &mut grads);
                if self.done {
                    break;
                }
            }
            if it == 1 {
                for &s in &sizes {
                    state.push(self.malloc(s, OptimInit));
                    state.push(self.malloc(s, OptimInit));
                }
            }
            for &s in &sizes {
                let t = self.malloc(s, OptimStep);
                self.free(t, OptimStep);
            }
            self.tick(100, 2_000);
            // An iteration cut short by the end of the entries has no END,
            // as with a real recording dumped mid-step.
            if !self.done {
                self.sink.annotation(it, false, self.time);
            }
            it += 1;
        }
        if self.oom {
            self.out_of_memory();
        }
        self.count
    }

    fn micro_batch(&mut self, first: bool, params: &[u64], grads: &mut [Tensor]) {
        let m = &self.model;
        let s = (m.seq - self.rng.below(m.seq / 4 + 1)).max(8) / 8 * 8;
        let (b, d, e) = (m.batch, m.d, m.elem);
        let bsd = b * s * d * e;
        let bss = b * m.heads * s * s * e;
        let stats = b * s * 4;
        let logits = b * s * m.vocab * e;
        self.tick(1_000, 5_000);
        let ids = self.malloc(b * s * 8, Data);
        let targets = self.malloc(b * s * 8, Data);
        let mut h = self.malloc(bsd, Embedding);
        let mut saved: Vec<Vec<Tensor>> = Vec::new();
        for _ in 0..self.model.blocks {
            let mut keep = vec![h];
            keep.extend([
                self.malloc(bsd, LayerNorm),
                self.malloc(stats, LayerNorm),
                self.malloc(stats, LayerNorm),
            ]);
            keep.push(self.malloc(3 * bsd, Qkv));
            let (q, k) = (self.malloc(bsd, AttnScores), self.malloc(bsd, AttnScores));
            let scores = self.malloc(bss, AttnScores);
            self.free(q, AttnScores);
            self.free(k, AttnScores);
            keep.push(self.malloc(bss, Softmax));
            self.free(scores, Softmax);
            keep.extend([self.malloc(bss / e, Dropout), self.malloc(bss, Dropout)]);
            keep.push(self.malloc(bsd, AttnContext));
            let proj = self.malloc(bsd, Proj);
            keep.push(self.malloc(bsd, Residual));
            self.free(proj, Residual);
            keep.extend([
                self.malloc(bsd, LayerNorm),
                self.malloc(stats, LayerNorm),
                self.malloc(stats, LayerNorm),
            ]);
            keep.extend([self.malloc(4 * bsd, Fc1), self.malloc(4 * bsd, Gelu)]);
            let fc2 = self.malloc(bsd, Fc2);
            h = self.malloc(bsd, Residual);
            self.free(fc2, Residual);
            saved.push(keep);
            if self.done {
                return;
            }
        }
        let head = [
            self.malloc(bsd, LayerNorm),
            self.malloc(stats, LayerNorm),
            self.malloc(stats, LayerNorm),
        ];
        let out = self.malloc(logits, LmHead);
        if first && self.leak > 0 && self.malloc(self.leak, Leak).is_some() {
            self.leaked += self.leak;
        }
        let log_probs = self.malloc(logits, Loss);
        let loss = self.malloc(4, Loss);
        // Backward, last layer first.
        let g_logits = self.malloc(logits, BwdLoss);
        self.free(log_probs, BwdLoss);
        let mut g_h = self.malloc(bsd, BwdLinear);
        self.grad(0, params, grads, first);
        self.free(g_logits, BwdLinear);
        self.free_all(&head, BwdLayerNorm);
        self.free(h, BwdLayerNorm);
        self.grad(params.len() - 2, params, grads, first);
        self.grad(params.len() - 1, params, grads, first);
        for (n, keep) in saved.into_iter().enumerate().rev() {
            let p = 2 + 12 * n;
            let g_gelu = self.malloc(4 * bsd, BwdLinear);
            self.grad(p + 10, params, grads, first);
            self.grad(p + 11, params, grads, first);
            let g_fc1 = self.malloc(4 * bsd, BwdGelu);
            self.free(g_gelu, BwdGelu);
            self.free_all(&keep[13..15], BwdGelu);
            let g_ln2 = self.malloc(bsd, BwdLinear);
            self.grad(p + 8, params, grads, first);
            self.grad(p + 9, params, grads, first);
            self.free(g_fc1, BwdLinear);
            let g_x1 = self.malloc(bsd, BwdLayerNorm);
            self.free(g_ln2, BwdLayerNorm);
            self.free_all(&keep[10..13], BwdLayerNorm);
            self.grad(p + 6, params, grads, first);
            self.grad(p + 7, params, grads, first);
            self.free(g_h, BwdLayerNorm);
            let g_ctx = self.malloc(bsd, BwdLinear);
            self.grad(p + 4, params, grads, first);
            self.grad(p + 5, params, grads, first);
            let (g_drop, g_v) = (
                self.malloc(bss, BwdAttention),
                self.malloc(bsd, BwdAttention),
            );
            self.free(g_ctx, BwdAttention);
            self.free_all(&keep[8..10], BwdAttention);
            let g_probs = self.malloc(bss, BwdDropout);
            self.free(g_drop, BwdDropout);
            self.free_all(&keep[6..8], BwdDropout);
            let g_scores = self.malloc(bss, BwdSoftmax);
            self.free(g_probs, BwdSoftmax);
            self.free(keep[5], BwdSoftmax);
            let (g_q, g_k) = (
                self.malloc(bsd, BwdAttention),
                self.malloc(bsd, BwdAttention),
            );
            self.free(g_scores, BwdAttention);
            let g_qkv = self.malloc(3 * bsd, BwdAttention);
            self.free_all(&[g_q, g_k, g_v], BwdAttention);
            let g_ln1 = self.malloc(bsd, BwdLinear);
            self.grad(p + 2, params, grads, first);
            self.grad(p + 3, params, grads, first);
            self.free(g_qkv, BwdLinear);
            self.free(keep[4], BwdLinear);
            g_h = self.malloc(bsd, BwdLayerNorm);
            self.free(g_ln1, BwdLayerNorm);
            self.free_all(&keep[1..4], BwdLayerNorm);
            self.grad(p, params, grads, first);
            self.grad(p + 1, params, grads, first);
            self.free_all(&[g_x1, keep[0]], BwdLayerNorm);
            if self.done {
                return;
            }
        }
        self.grad(0, params, grads, false);
        self.grad(1, params, grads, first);
        self.free(g_h, BwdEmbedding);
        self.free_all(&[ids, targets, loss, out], Loss);
    }

    /// Gradient of parameter `n`: created on the first micro-batch of a
    /// step, accumulated (a temporary added in place) afterwards.
    fn grad(&mut self, n: usize, params: &[u64], grads: &mut [Tensor], first: bool) {
        if first && grads[n].is_none() {
            grads[n] = self.malloc(params[n], AccumulateGrad);
        } else {
            let t = self.malloc(params[n], BwdLinear);
            self.free(t, AccumulateGrad);
        }
    }

    fn free_all(&mut self, tensors: &[Tensor], site: Site) {
        for &t in tensors {
            self.free(t, site);
        }
    }

    fn tick(&mut self, lo: u64, hi: u64) {
        self.time += self.rng.range(lo, hi);
    }

    /// Whether `cost` more entries fit; once they do not, only smaller
    /// operations still run, so the trace ends exactly at the limit.
    fn admit(&mut self, cost: u64) -> bool {
        if self.done || self.sink.stopped() {
            self.done = true;
            return false;
        }
        let reserve = if self.oom {
            1 + self.alloc.releasable()
        } else {
            0
        };
        if self.count + cost + reserve <= self.limit {
            self.probe_window(cost);
            return true;
        }
        self.finishing = true;
        self.done = self.count + 1 + reserve > self.limit;
        false
    }

    /// Measures the live bytes when the window starts within the next
    /// `cost` entries (before the operation that makes them).
    fn probe_window(&mut self, cost: u64) {
        let Some(probe) = &self.probe else { return };
        if self.count <= probe.start && probe.start < self.count + cost {
            self.start_live = self
                .alloc
                .live_blocks()
                .map(|b| {
                    if probe.live_at_end.contains(&b.ctx) {
                        b.size
                    } else {
                        b.requested
                    }
                })
                .sum();
        }
    }

    fn malloc(&mut self, requested: u64, site: Site) -> Tensor {
        let cost = 1 + self.alloc.growth_events(requested);
        if !self.admit(cost) {
            return None;
        }
        self.ctx += 1;
        let stack = self.stacks.alloc(site);
        let (addr, grow) = self.alloc.malloc(requested, self.ctx, stack);
        if grow.is_empty() {
            self.tick(2, 60);
        }
        for (action, a, size) in grow {
            self.tick(20, 400);
            self.emit(action, a, size, stack);
            self.tick(2, 20);
        }
        self.emit(Action::Alloc, addr, requested, stack);
        Some(addr)
    }

    fn free(&mut self, tensor: Tensor, site: Site) {
        let Some(addr) = tensor else { return };
        if !self.admit(2) {
            return;
        }
        self.ctx += 1;
        let stack = self.stacks.free(site);
        let requested = self.alloc.free(addr);
        self.tick(2, 40);
        self.emit(Action::FreeRequested, addr, requested, stack);
        self.emit(Action::FreeCompleted, addr, requested, stack);
    }

    /// The final failed allocation: cached memory is released, then the
    /// request still does not fit in what the device has left.
    fn out_of_memory(&mut self) {
        let room = self.limit.saturating_sub(self.count);
        if room == 0 || self.sink.stopped() {
            return;
        }
        let releases = self.alloc.releasable().min(room - 1);
        self.probe_window(releases + 1);
        self.ctx += 1;
        let stack = self.stacks.alloc(LmHead);
        self.tick(50, 500);
        for (action, addr, size) in self.alloc.release_cached(releases) {
            self.emit(action, addr, size, stack);
            self.tick(20, 200);
        }
        let used = self.alloc.reserved + OUTSIDE_ALLOCATOR;
        let device_free = DEVICE_MEMORY.saturating_sub(used);
        let request = round_size(device_free + self.rng.range(256 << 20, 8 << 30));
        self.emit(Action::Oom, device_free, request, stack);
    }

    fn emit(&mut self, action: Action, addr: u64, size: u64, stack: crate::stacks::StackId) {
        let ev = Event {
            action,
            addr,
            size,
            time_us: self.time,
            stack,
            ctx: self.ctx,
        };
        self.sink.event(self.count, &ev);
        self.count += 1;
    }
}
