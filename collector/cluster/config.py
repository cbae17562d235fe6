"""Settings of cluster learning (YAML section `cluster`): whether each replica reads every
replica's score records back from the Kafka results topic to feed its drift detector, adaptive
sampling and diagnostics (collector/cluster/feed.py, docs/KAFKA.md)."""
from __future__ import annotations

from typing import Annotated

from ctxprec.collector.config_types import Count, choice, setting
from pydantic import BaseModel, BeforeValidator, ConfigDict

LEARNING_MODES = ("auto", "on", "off")


class ClusterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    learning: Annotated[str, BeforeValidator(choice(*LEARNING_MODES))] = setting(
        "auto", "learn from every replica's scores: read the Kafka results topic outside the scoring group and feed "
                "the drift detector, adaptive sampling and diagnostics with the other replicas' records (auto: on "
                "with Kafka input and a results topic)", flag="--cluster-learning", choices=LEARNING_MODES)
    max_lag_records: Count = setting(10_000, "records the cluster feed may fall behind on a partition of the results "
                                             "topic before it skips to the end (counted as skipped), so learning "
                                             "stays current", flag="--cluster-max-lag-records")

    def enabled(self, *, kafka_input: bool, results_topic: str | None) -> bool:
        """Whether this replica learns from the others; raises ValueError when `on` cannot work."""
        if self.learning == "off":
            return False
        possible = kafka_input and bool(results_topic)
        if self.learning == "on" and not possible:
            raise ValueError("cluster.learning on needs Kafka input and kafka.results_topic (the replicas' score "
                             "records are read back from it)")
        return possible
