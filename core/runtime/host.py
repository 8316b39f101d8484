"""How this process serves, as a value a ModelManager passes to the versions it compiles: many
requests at once (`serve`, Cloud Run) or one at a time (Lambda), and how long a stateful
model's idle sequence lives."""

from __future__ import annotations

import math
from dataclasses import dataclass

SEQUENCE_IDLE_S = 300.0  # OVMS's --sequence_cleaner_poll_wait_minutes default, 5


@dataclass(frozen=True)
class Host:
    concurrent: bool = False  # many requests at once vs one per instance
    sequence_idle_s: float = SEQUENCE_IDLE_S  # a stateful sequence idle this long is dropped
    gather: bool = True  # adaptive execution may gather a one-row model's requests on one compile

    @classmethod
    def of(cls, concurrent: bool, sequence_cleaner_minutes: float, gather: bool = True) -> Host:
        """From the settings; a cleaner period of 0 minutes keeps idle sequences forever."""
        minutes = sequence_cleaner_minutes
        return cls(concurrent, minutes * 60 if minutes > 0 else math.inf, gather)

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
