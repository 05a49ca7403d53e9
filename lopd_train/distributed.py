"""Data-parallel training under ``accelerate launch``: what each rank does alone and what the ranks agree on.

``accelerate launch --num_processes N -m lopd_train.cli ...`` starts N copies of the trainer. Each rank runs
its own envs and rollouts (its task sampling and generation seeded by its rank), scores them and computes
its gradients; everything that must stay identical across ranks goes through accelerate's collectives
(``accelerate.PartialState`` and ``accelerate.utils``: gloo on CPUs, NCCL on GPUs), never anything home-made:

* **gradients** of the student and of the composer are averaged over the ranks before clipping and the
  optimiser step (:meth:`Distributed.sync_gradients`, called by ``Algorithm.step_optimizer``), so every
  rank takes the same step and the weights stay identical (what DDP does, done on the LoRA and Q-Former
  gradients only: the backbone is frozen and the one model serves several adapters, which DDP's
  forward-hook wrapping cannot follow). A parameter without a gradient on some rank counts as zero there;
  a parameter without a gradient on every rank stays without one, as in a single-process run;
* the **experience bank** is one SQLite file: every rank's successes are gathered, rank 0 writes them, all
  wait, and every rank indexes the same new rows (:meth:`Distributed.add_to_bank`);
* the **dual update's statistic** (the token-weighted margin) and the **counters** (rollouts, successes)
  are summed over the ranks, so β and the counts are the same everywhere;
* **checkpoints** are written once, by rank 0, after gathering every rank's random generators (so a
  resumed run continues each rank's own stream exactly), and read by all; logs, TensorBoard, the curve and
  the export are rank 0's.

Without a launcher (``WORLD_SIZE`` unset or 1) :func:`from_environment` returns :data:`LOCAL`, whose
methods do nothing, so a plain run is exactly what it was before.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch


class Local:
    """One process: every collective is the identity."""

    rank = 0
    world_size = 1
    is_main = True
    device: torch.device | None = None

    def barrier(self) -> None:
        pass

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        yield

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def sum(self, *values: float) -> tuple[float, ...]:
        return tuple(values)

    def any(self, flag: bool) -> bool:
        return bool(flag)

    def max_int(self, value: int) -> int:
        return int(value)

    def sync_gradients(self, params: Iterable[torch.Tensor]) -> None:
        pass

    def broadcast_parameters(self, params: Iterable[torch.Tensor]) -> None:
        pass

    def rank_seed(self, seed: int) -> int:
        return int(seed)

    def add_to_bank(self, bank, traces: Sequence[Any], rollout: int) -> list[Any]:
        return bank.add(list(traces), rollout=rollout)

    def merge_rows(self, row: dict[str, Any]) -> dict[str, Any]:
        return row


LOCAL = Local()


def launched_world_size() -> int:
    """The number of processes a launcher (accelerate, torchrun) started, from the environment it sets."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ValueError(f"WORLD_SIZE must be an integer, got {os.environ['WORLD_SIZE']!r}") from None


def use_cpu() -> bool:
    """Whether the ranks run on CPUs: no CUDA device, or ``accelerate launch --cpu`` (``ACCELERATE_USE_CPU``)."""
    flag = os.environ.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes")
    return flag or not torch.cuda.is_available()


def rank_seed(seed: int, rank: int) -> int:
    """Rank 0 keeps ``seed`` (a one-process launch equals a plain run); every other rank gets its own stream
    derived from ``(seed, rank)`` by NumPy's SeedSequence, so ranks never sample the same rollouts."""
    if rank == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(rank)]).generate_state(1, dtype=np.uint32)[0])


class Distributed(Local):
    """N processes started by ``accelerate launch`` (or torchrun): accelerate's ``PartialState`` sets up the
    process group (gloo on CPU, NCCL on GPUs) and its operations do the communication."""

    def __init__(self) -> None:
        from accelerate import PartialState

        # no GPU (or `--cpu`): gloo over CPU processes; accelerate picks NCCL only when told the GPUs are there
        self.state = PartialState(cpu=use_cpu())
        self.rank = int(self.state.process_index)
        self.world_size = int(self.state.num_processes)
        self.is_main = bool(self.state.is_main_process)
        device = torch.device(self.state.device)
        # accelerate names a CPU rank's device "cpu:<rank>"; torch.load cannot map tensors saved there back
        self.device = torch.device("cpu") if device.type == "cpu" else device

    # ------------------------------------------------------------------ plumbing
    def barrier(self) -> None:
        self.state.wait_for_everyone()

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (creates files), the others after it."""
        with self.state.main_process_first():
            yield

    def _tensor(self, values, dtype=torch.float64) -> torch.Tensor:
        # NCCL moves only tensors on the rank's GPU; gloo takes CPU tensors
        device = self.device if self.device is not None and self.device.type == "cuda" else torch.device("cpu")
        return torch.as_tensor(values, dtype=dtype, device=device)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (any picklable value), in rank order, on every rank."""
        from accelerate.utils import gather_object

        return list(gather_object([obj]))

    def sum(self, *values: float) -> tuple[float, ...]:
        from accelerate.utils import reduce

        out = reduce(self._tensor(list(values)), reduction="sum")
        return tuple(float(v) for v in out.cpu())

    def any(self, flag: bool) -> bool:
        return self.sum(1.0 if flag else 0.0)[0] > 0

    def max_int(self, value: int) -> int:
        return int(max(self.gather(int(value))))

    def rank_seed(self, seed: int) -> int:
        return rank_seed(seed, self.rank)

    # ------------------------------------------------------------------ weights and gradients
    def sync_gradients(self, params: Iterable[torch.Tensor]) -> None:
        """Average ``params``' gradients over the ranks, in place, as one flat all-reduce. Call it on every
        rank before clipping: the clip coefficient and the non-finite check then agree everywhere."""
        from accelerate.utils import reduce

        params = [p for p in params if p.requires_grad]
        if not params:
            return
        present = reduce(self._tensor([p.grad is not None for p in params], torch.float32), reduction="sum")
        live = [p for p, n in zip(params, present.cpu().tolist()) if n > 0]
        if not live:
            return
        for p in live:
            if p.grad is None:  # this rank did not touch it (e.g. nothing retrieved here): a zero contribution
                p.grad = torch.zeros_like(p)
        flat = self._tensor(torch.cat([p.grad.detach().reshape(-1).to(torch.float32).cpu() for p in live]),
                            torch.float32)
        flat = reduce(flat, reduction="mean").cpu()
        offset = 0
        for p in live:
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p.grad).to(p.grad.dtype))
            offset += n

    def broadcast_parameters(self, params: Iterable[torch.Tensor]) -> None:
        """Rank 0's values of ``params`` on every rank (what DDP does at construction)."""
        from accelerate.utils import broadcast

        with torch.no_grad():
            for p in params:
                src = self._tensor(p.detach().cpu(), p.dtype)
                p.copy_(broadcast(src, from_process=0).to(p.device))

    # ------------------------------------------------------------------ the experience bank and the logs
    def add_to_bank(self, bank, traces: Sequence[Any], rollout: int) -> list[Any]:
        """Every rank's successful ``traces`` into the one bank: gathered (as JSON, in rank order), written by
        rank 0 (the bank deduplicates, so each success is stored once), then all ranks wait and return the
        same new experiences (read back from the file by their ids)."""
        from accelerate.utils import broadcast_object_list

        from lopd_envs.trace import Trace

        gathered = self.gather([t.to_json() for t in traces])
        ids: list[int] = []
        if self.is_main:
            ids = [e.id for e in bank.add([Trace.from_json(j) for part in gathered for j in part], rollout=rollout)]
        ids = broadcast_object_list([ids], from_process=0)[0]
        self.barrier()
        return [bank.get(i) for i in ids]

    def merge_rows(self, row: dict[str, Any]) -> dict[str, Any]:
        """One metrics row for the whole run: each number is the mean over the ranks (kept as is where all
        ranks agree, e.g. the step, β, the bank size); anything else is rank 0's."""
        rows = self.gather(row)
        out = dict(rows[0])
        for key, value in rows[0].items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            values = [r.get(key) for r in rows]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and \
                    any(v != value for v in values):
                out[key] = float(np.mean(values))
        return out


def from_environment() -> Local:
    """:class:`Distributed` under a launcher with more than one process, else :data:`LOCAL`. A sharded
    launch (FSDP, DeepSpeed) is refused: the trainer replicates the frozen backbone and averages the adapter
    gradients itself, so sharding would be silently ignored."""
    for flag, name in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")):
        if os.environ.get(flag, "").strip().lower() in ("1", "true", "yes"):
            raise NotImplementedError(f"lopd-train does not shard the model ({name}) yet: launch data-parallel "
                                      "with examples/accelerate/ddp.yaml (see examples/accelerate/README.md)")
    return Distributed() if launched_world_size() > 1 else LOCAL


def rank_rng_state(blob: dict[str, Any], dist: Local) -> dict[str, Any]:
    """This rank's random generators from a checkpoint (``rng_ranks`` holds one per rank of a data-parallel
    run; ``rng`` is rank 0's). A run resumes only with the number of processes it was saved with: another
    count would silently give ranks someone else's stream."""
    ranks = blob.get("rng_ranks")
    saved = len(ranks) if ranks else 1
    if saved != dist.world_size:
        raise ValueError(f"this checkpoint was written by {saved} process(es); resume it with "
                         f"accelerate launch --num_processes {saved} (now {dist.world_size})")
    return ranks[dist.rank] if ranks else blob["rng"]


def trainable_parameters(policy: torch.nn.Module, algo: Any) -> list[torch.Tensor]:
    """What must start identical on every rank: the LoRA weights on the backbone (student, composer,
    anchor) and the parameters of the algorithm's own modules (LOPD's Q-Formers)."""
    params = [p for n, p in policy.named_parameters() if "lora_" in n]
    for value in vars(algo).values():
        module = getattr(value, "qformer", value)
        if isinstance(module, torch.nn.Module) and module is not policy:
            params += list(module.parameters())
    seen: set[int] = set()
    return [p for p in params if not (id(p) in seen or seen.add(id(p)))]
