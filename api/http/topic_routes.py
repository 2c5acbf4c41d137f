"""Topic configs and the node's settings over HTTP (Kafka's DescribeConfigs / IncrementalAlterConfigs in JSON):

    GET   /v1/topics/{topic}            the topic with its configs, each {"value", "source": topic|default}
    DELETE /v1/topics/{topic}           (admin) delete the topic: its partitions, data, configs, group offsets;
                                        {"name", "partitions", "topic_id", "deleted": true}; 404 when unknown
    POST  /v1/topics/{topic}/partitions (admin) {"partitions": N}: grow the topic to N partitions (only grows, as
                                        Kafka's CreatePartitions); the topic as GET shows it, once each is served
    PATCH /v1/topics/{topic}/configs    {"configs": {"retention.ms": 172800000, "retention.bytes": null}}
                                        (a value sets, null removes: back to the server default; the configs
                                        are retention.ms, retention.bytes and max.message.bytes)
    GET   /v1/config                    (admin) the node's and its index's effective settings, and the server's
                                        ("server": URLs with passwords and keys masked, no token shown)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from api.backend import Backend
from api.config import shown_settings
from api.http.auth import require
from api.http.models import TopicConfigsChange, whole_count
from api.http.routes import ERRORS, TopicPath, call
from api.security.redact import REDACTOR
from broker.partitions.topics import MAX_PARTITIONS

router = APIRouter(responses=ERRORS)


class ConfigValue(BaseModel):
    value: int = Field(description="-1 = unlimited (retention.ms, retention.bytes)")
    source: str = Field(description="topic: set on the topic; default: the server default")


class TopicDetailOut(BaseModel):
    name: str
    partitions: int
    topic_id: int
    configs: dict[str, ConfigValue]


class TopicConfigsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    configs: TopicConfigsChange = Field(
        description="retention.ms / retention.bytes (-1 = unlimited), max.message.bytes (0 to 2**31-1): an "
                    "integer sets, null removes",
        examples=[{"retention.ms": 172_800_000}])


@router.get("/v1/topics/{topic}", response_model=TopicDetailOut, dependencies=[Depends(require("read"))])
async def describe_topic(topic: TopicPath, request: Request) -> Any:
    return await call(request, Backend.describe_topic, topic)


class TopicDeletedOut(BaseModel):
    name: str
    partitions: int
    topic_id: int
    deleted: bool = Field(True, description="always true: the topic is gone; its bytes are reclaimed later "
                                            "(see docs/OPERATIONS.md)")


@router.delete("/v1/topics/{topic}", response_model=TopicDeletedOut, dependencies=[Depends(require("admin"))])
async def delete_topic(topic: TopicPath, request: Request) -> Any:
    """Delete the topic on every node: produce, fetch, key and id lookups no longer see it, and a topic
    created again under the name starts empty at offset 0."""
    return {**await call(request, Backend.delete_topic, topic), "deleted": True}


class PartitionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: Annotated[int, BeforeValidator(whole_count)] = Field(
        ge=1, le=MAX_PARTITIONS, examples=[8], description="the topic's new partition count: more than it has now "
                                                           "(a JSON integer, never a string)")


@router.post("/v1/topics/{topic}/partitions", response_model=TopicDetailOut, dependencies=[Depends(require("admin"))])
async def add_partitions(topic: TopicPath, body: PartitionsIn, request: Request) -> Any:
    """Grow the topic to `partitions` partitions, spread over the live nodes; existing partitions keep their
    records. 400 when the count is not more than the topic has (the count only grows), 404 when unknown."""
    return await call(request, Backend.add_partitions, topic, body.partitions)


@router.patch("/v1/topics/{topic}/configs", response_model=TopicDetailOut,
              dependencies=[Depends(require("admin"))])
async def alter_topic_configs(topic: TopicPath, body: TopicConfigsIn, request: Request) -> Any:
    return await call(request, Backend.alter_topic_configs, topic, body.configs.as_dict())


@router.get("/v1/config", dependencies=[Depends(require("admin"))])
async def effective_config(request: Request) -> dict[str, Any]:
    effective = await call(request, Backend.effective_config)
    return REDACTOR.value({**effective, "server": shown_settings(request.app.state.settings)})
