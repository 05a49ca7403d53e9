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

Under an FSDP launch (``distributed_type: FSDP``, ``fsdp_version: 2``; examples/accelerate/fsdp.yaml) the
frozen backbone is also **sharded** (:class:`Sharded`): ``torch.distributed.fsdp.fully_shard`` on every
decoder layer (accelerate's ``TRANSFORMER_BASED_WRAP``: the classes named by ``fsdp_transformer_layer_cls_to_wrap``
or the model's ``_no_split_modules``) and on the model, with accelerate's FSDP plugin reading the launch
settings. Between phases each rank holds 1/N of the backbone. The LoRA adapters (student, composer, anchor,
EMA) are FSDP's *ignored* parameters and the Q-Former is no part of the backbone: both stay replicated,
their gradients averaged by :meth:`Distributed.sync_gradients` as under DDP, so optimisers, checkpoints, the
exported adapter and the vLLM sync are the same files as in a DDP or single-process run. Why not let FSDP
shard and reduce the adapters too: FSDP communicates inside every forward and backward (all-gathers, then
reduce-scatters), so all ranks must run the same passes in the same order, and ours do not (each rank its own
rollouts, turns, retrieval hits and groups). So each phase whose passes differ between ranks (a rollout batch
with HF generate, an update, the cold start, the held-out evaluation) runs inside :meth:`Local.unsharded`:
every layer is gathered once at its start (the same collectives on every rank), no collective runs inside
(generation passes ``synced_gpus=False``), and the layers are sharded again at its end. The memory that sharding saves is the backbone's between phases
(e.g. while a colocated vLLM engine samples); during a phase a rank holds the whole backbone, as under DDP.

Without a launcher (``WORLD_SIZE`` unset or 1) :func:`from_environment` returns :data:`LOCAL`, whose
methods do nothing, so a plain run is exactly what it was before.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from lopd_train import textforms

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule

log = logging.getLogger(__name__)


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

    def on_main(self, write) -> Any:
        return write()

    def prepare_model(self, policy) -> None:
        """Shard the backbone (FSDP only); the policy's adapters must all exist by now."""

    @contextlib.contextmanager
    def unsharded(self, model, when: bool = True) -> Iterator[None]:
        """The whole backbone on this rank for the block (FSDP only: nothing to do otherwise)."""
        yield


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
        assert self.state.device is not None, "PartialState sets its device when it starts"
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

    @staticmethod
    def _reduce(tensor: torch.Tensor, reduction: str) -> torch.Tensor:
        """accelerate's ``reduce`` over one tensor (it also takes nested containers, so its result is
        untyped)."""
        from accelerate.utils import reduce

        return cast(torch.Tensor, reduce(tensor, reduction=reduction))

    def sum(self, *values: float) -> tuple[float, ...]:
        out = self._reduce(self._tensor(list(values)), "sum")
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
        params = [p for p in params if p.requires_grad]
        if not params:
            return
        present = self._reduce(self._tensor([p.grad is not None for p in params], torch.float32), "sum")
        live = [p for p, n in zip(params, present.cpu().tolist()) if n > 0]
        if not live:
            return
        grads: list[torch.Tensor] = []
        for p in live:
            if p.grad is None:  # this rank did not touch it (e.g. nothing retrieved here): a zero contribution
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        flat = self._tensor(torch.cat([g.detach().reshape(-1).to(torch.float32).cpu() for g in grads]),
                            torch.float32)
        flat = self._reduce(flat, "mean").cpu()
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset:offset + n].view_as(g).to(g.dtype))
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

    def on_main(self, write) -> Any:
        """``write()`` on rank 0 only (a file every rank shares: a bank, a skill bank); its result, which
        must be picklable (e.g. the ids of the new rows), on every rank once it is done."""
        from accelerate.utils import broadcast_object_list

        result = write() if self.is_main else None
        result = broadcast_object_list([result], from_process=0)[0]
        self.barrier()
        return result

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


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def from_environment() -> Local:
    """:class:`Sharded` under an FSDP launch with more than one process, :class:`Distributed` under any other
    launcher with more than one process, else :data:`LOCAL`. A DeepSpeed launch is refused (ZeRO would shard
    what this module replicates and reduces itself); the FSDP settings are checked even for one process."""
    if _flag("ACCELERATE_USE_DEEPSPEED"):
        raise NotImplementedError("lopd-train does not run under DeepSpeed: launch data-parallel with "
                                  "examples/accelerate/ddp.yaml or sharded with fsdp.yaml (see "
                                  "examples/accelerate/README.md)")
    settings = fsdp_settings_from_environment()
    if launched_world_size() <= 1:
        return LOCAL
    return Sharded(settings) if settings is not None else Distributed()


# ----------------------------------------------------------------------------------- FSDP

@dataclass(frozen=True)
class FSDPSettings:
    """What lopd-train takes from an FSDP launch (accelerate's ``FSDP_*`` environment)."""

    #: class names of the modules sharded one by one; empty: the model's ``_no_split_modules``
    layer_classes: tuple[str, ...] = ()
    #: free a layer's gathered weights after its forward (inside :meth:`Sharded.unsharded` they stay)
    reshard_after_forward: bool = True
    #: keep the shards in CPU memory (FSDP2's ``CPUOffloadPolicy``)
    offload_params: bool = False


#: launch settings that lopd-train does not apply, and why (each logged once when set)
IGNORED_FSDP_SETTINGS = {
    "FSDP_CPU_RAM_EFFICIENT_LOADING": "every rank loads the model, then shards it",
    "FSDP_ACTIVATION_CHECKPOINTING": "use --gradient-checkpointing",
    "FSDP_SYNC_MODULE_STATES": "every rank loads the same weights; the adapters are broadcast from rank 0",
}


def fsdp_settings_from_environment() -> FSDPSettings | None:
    """The FSDP settings of ``accelerate launch`` (None when the launch is not FSDP), parsed by accelerate's
    own ``FullyShardedDataParallelPlugin``. Refused with a clear error: FSDP1 (``fsdp_version: 1``), a wrap
    policy other than ``TRANSFORMER_BASED_WRAP``, and mixed precision (``--dtype`` picks the weights)."""
    if not _flag("ACCELERATE_USE_FSDP"):
        return None
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import CPUOffloadPolicy

    plugin = FullyShardedDataParallelPlugin()
    if int(plugin.fsdp_version) != 2:
        raise ValueError(f"lopd-train shards with FSDP2 only: set fsdp_version: 2 (got {plugin.fsdp_version})")
    policy = os.environ.get("FSDP_AUTO_WRAP_POLICY", "NO_WRAP")
    if policy != "TRANSFORMER_BASED_WRAP":
        raise ValueError(f"lopd-train shards per decoder layer: set fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP "
                         f"(got {policy})")
    precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").strip().lower()
    if precision not in ("no", ""):
        raise ValueError(f"mixed_precision {precision!r} under FSDP: lopd-train picks the weights' dtype itself "
                         "(--dtype: bf16 on GPUs); launch with mixed_precision: 'no'")
    for name, why in IGNORED_FSDP_SETTINGS.items():
        if _flag(name):
            log.warning("%s is not used by lopd-train: %s", name, why)
    names = textforms.as_list(plugin.transformer_cls_names_to_wrap)  # accelerate's: a comma string or a list
    return FSDPSettings(layer_classes=tuple(names),
                        reshard_after_forward=bool(plugin.reshard_after_forward),
                        offload_params=isinstance(plugin.cpu_offload, CPUOffloadPolicy))


def sharding_plan(model: torch.nn.Module, layer_classes: Sequence[str] = ()) -> list[str]:
    """The names (in ``model.named_modules()``) of the modules that get their own ``fully_shard``, in the
    order to apply it: every decoder layer (modules whose class is in ``layer_classes``, default the model's
    ``_no_split_modules``), then ``""``, the model itself, which takes the rest (embeddings, final norm, LM
    head, tied or not, in one unit). Refused: no such class in the model (nothing would be sharded per layer),
    and a layer inside another (FSDP units do not nest that way here)."""
    names = tuple(layer_classes) or tuple(getattr(model, "_no_split_modules", None) or ())
    if not names:
        raise ValueError(f"{type(model).__name__} names no decoder-layer class (_no_split_modules); set "
                         "fsdp_transformer_layer_cls_to_wrap")
    layers = [n for n, m in model.named_modules() if n and type(m).__name__ in names]
    if not layers:
        present = sorted({type(m).__name__ for m in model.modules()})
        raise ValueError(f"no module of class {', '.join(names)} in {type(model).__name__} (its classes: "
                         f"{', '.join(present)})")
    for a in layers:
        for b in layers:
            if a != b and b.startswith(a + "."):
                raise ValueError(f"decoder layer {b} lies inside decoder layer {a}")
    return [*layers, ""]


def replicated_parameters(policy: torch.nn.Module) -> set[torch.nn.Parameter]:
    """What FSDP leaves alone (``ignored_params``): every LoRA weight of every adapter."""
    return {p for n, p in policy.named_parameters() if "lora_" in n}


def shard_backbone(policy, settings: FSDPSettings, device: torch.device) -> list[FSDPModule]:
    """Apply :func:`sharding_plan` to the policy's backbone with FSDP2 (the LoRA weights ignored) and
    initialise FSDP from the root with a one-token forward (every rank runs it: it gathers each layer once).
    Returns the sharded modules, the root last. A trainable backbone weight is refused: its gradient would
    be FSDP's to reduce, and :meth:`Sharded.unsharded` turns that reduction off."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    # the ranks' mesh on their own device type (FSDP's default asks for an accelerator, even on CPU ranks)
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    base = policy.get_base_model()
    ignored = replicated_parameters(policy)
    trainable = [n for n, p in base.named_parameters() if p.requires_grad and p not in ignored]
    if trainable:
        raise ValueError(f"under FSDP only LoRA weights may be trained; trainable backbone weights: {trainable[:3]}")
    modules = dict(base.named_modules())
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda") if settings.offload_params else OffloadPolicy()
    units: list[FSDPModule] = []
    for name in sharding_plan(base, settings.layer_classes):
        # the root: FSDP's default
        kw: dict[str, Any] = {"reshard_after_forward": settings.reshard_after_forward} if name else {}
        units.append(fully_shard(modules[name], mesh=mesh, ignored_params=ignored, offload_policy=offload, **kw))
    with torch.no_grad():  # FSDP initialises from the module first called; scoring calls the decoder directly
        base(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=False)
    units[-1].reshard()
    return units


class Sharded(Distributed):
    """Data-parallel ranks with the frozen backbone sharded by FSDP2 (see the module docstring)."""

    def __init__(self, settings: FSDPSettings) -> None:
        super().__init__()
        self.settings = settings
        self.units: list[FSDPModule] = []
        self._depth = 0

    def prepare_model(self, policy) -> None:
        self.units = shard_backbone(policy, self.settings, self.device or torch.device("cpu"))

    @contextlib.contextmanager
    def unsharded(self, model, when: bool = True) -> Iterator[None]:
        """Every sharded layer gathered at the start (one all-gather each, on every rank: call it on every
        rank, in the same order) and kept gathered for the block, so no collective runs inside it and ranks
        may run different passes; sharded again at the end. Nested blocks use the outer one's gathering."""
        if not when or not self.units or self._depth:
            yield
            return
        for unit in self.units:
            unit.set_reshard_after_forward(False, recurse=False)
            unit.set_reshard_after_backward(False, recurse=False)
        for unit in self.units:
            unit.unshard()
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            for unit in self.units:
                unit.reshard()
                unit.set_reshard_after_backward(True, recurse=False)
            for unit in self.units[:-1]:
                unit.set_reshard_after_forward(self.settings.reshard_after_forward, recurse=False)


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
    anchor) and the parameters of the algorithm's own modules (LOPD's compressors)."""
    params = [p for n, p in policy.named_parameters() if "lora_" in n]
    for value in vars(algo).values():
        module = getattr(value, "compressor", value)
        if isinstance(module, torch.nn.Module) and module is not policy:
            params += list(module.parameters())
    seen: set[int] = set()
    return [p for p in params if not (id(p) in seen or seen.add(id(p)))]
