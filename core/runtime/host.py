"""How this process serves, as a value a ModelManager passes to the versions it compiles: many
requests at once (`serve`, Cloud Run) or one at a time (Lambda)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    concurrent: bool = False  # many requests at once vs one per instance

    @property
    def adaptive(self) -> bool:
        """Adaptive execution (core.runtime.adaptive) is for hosts that serve crowds."""
        return self.concurrent

    def default_properties(self) -> dict[str, str]:
        """One request per instance: one stream using every core (lowest latency). Concurrent
        hosts: OpenVINO's throughput streams (on 2 cores: 2 streams, +40% req/s at 8 clients,
        but a lone request runs on one core)."""
        return {"PERFORMANCE_HINT": "THROUGHPUT" if self.concurrent else "LATENCY"}

    def pool_floor(self, streams: int) -> int:
        """The fewest InferRequests a pool holds by default: on a concurrent host two per
        stream, so a stream has the next request queued when one ends."""
        return 2 * streams if self.concurrent else 1
