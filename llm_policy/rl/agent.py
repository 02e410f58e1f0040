"""``Agent``: LlamaGym's three-method API, trained by gym_llm's policy and PPO update.

LlamaGym users subclass ``Agent``, write ``get_system_prompt``, ``format_observation`` and
``extract_action``, and drive the env themselves with ``act`` / ``assign_reward`` /
``terminate_episode``. This class is deliberately thin: replies, exact token log-probs and values
come from :class:`gym_llm.LLMPolicy` (generate mode, with whole conversations as observations), and
the update is :meth:`gym_llm.PPO.train` on a :class:`gym_llm.rl.ppo.buffer.TextRolloutBuffer` holding the
collected turns in order, so GAE, the clipped surrogate, KL early stopping and logging are the same
code the SB3-style ``PPO.learn`` runs.

What differs from LlamaGym, on purpose:

* Each episode is a real conversation (system, then user/assistant turns) rendered by the model's
  own chat template, truncated from the oldest exchange to ``max_context_tokens``.
* Every reward belongs to the turn it was paid for; returns are discounted and advantages come from
  turn-level GAE with the value head (LlamaGym split the last reward evenly over the turns).
* A reply ``extract_action`` cannot turn into a valid action is handled by a declared policy
  (parser rules, then a fallback action with a penalty), counted, and never shifts rewards onto the
  wrong turn.
* A saved Agent is ``PPO.save``'s directory plus ``agent.json`` (its own settings) and
  ``episodes.json`` (finished episodes not trained on yet), so one saved between two updates
  continues where it stopped.
"""

from __future__ import annotations

import abc
import json
import os
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, SupportsFloat, TypeVar

import torch
from gymnasium import spaces

from gym_llm.policy.llm_policy import LLMPolicy
from gym_llm.policy.prompts import Message
from gym_llm.policy.top_layers import TrainableLayers
from gym_llm.replies import conversation_json
from gym_llm.rl.agent_config import (
    agent_json,
    agent_policy_kwargs,
    check_arguments,
    resolve_configs,
    saved_arguments,
)
from gym_llm.rl.common.checkpoint_files import agent_path
from gym_llm.rl.common.learn_logger import learn_logger
from gym_llm.rl.episodes import (
    EPISODES_FILE,
    Counts,
    Episode,
    Turn,
    best_episodes,
    episode_stats,
    episodes_buffer,
    episodes_json,
    read_episodes,
)
from gym_llm.rl.ppo import PPO
from gym_llm.rl.ppo.buffer import TextRolloutBuffer
from gym_llm.spaces import TextActions, TextObservations
from gym_llm.wrappers.resolver import (
    ActionResolver,
    OnInvalid,
    Resolution,
    ResolverSettings,
    rules_for,
)

SelfAgent = TypeVar("SelfAgent", bound="Agent")


#: What :meth:`Agent.to_action` made of a reply (source: "extract_action", "parser:<rule>" or
#: "fallback").
ActionOutcome = Resolution


class Agent(ResolverSettings, abc.ABC):
    """An LLM agent you drive by hand, LlamaGym style; trained with gym_llm's PPO.

    Args:
        model: a registry name (``"smollm2-135m"``), a path or hub id, or a loaded Hugging Face
            causal LM object (then pass ``tokenizer``; ``save`` needs it to have a
            ``name_or_path`` it can be reloaded from).
        tokenizer: the tokenizer of a model object (ignored for names and paths).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ...
        generate_config: ``max_new_tokens``, ``temperature``, ``do_sample`` (``False``: greedy).
            ``top_p``/``top_k`` are ignored with a warning (PPO needs exact log-probs of the full
            distribution). LlamaGym's ``generate_config_dict`` keyword works too.
        ppo_config: TRL names (``batch_size`` = episodes per update, ``mini_batch_size`` = turns
            per optimizer step, ``learning_rate``, ``ppo_epochs``, ``gamma``, ``lam``,
            ``cliprange``, ``vf_coef``, ``target_kl``, ``init_kl_coef``, ``max_grad_norm``,
            ``seed``) or gym_llm's PPO names (:data:`gym_llm.rl.agent_config.PPO_KEYS`). LlamaGym's ``ppo_config_dict``
            keyword works too. Unknown keys raise.
        sft_warm_start: run supervised fine-tuning on ``sft_demos`` before any RL
            (:func:`gym_llm.rl.sft.warm_start`).
        sft_demos: chat-messages JSONL path or records for the warm start.
        sft_replay: after each update, fine-tune one epoch on the top ``sft_replay`` share (by
            return) of the last ``sft_replay_window`` episodes; 0 = off.
        sft_kwargs: extra keyword arguments for ``warm_start`` (``learning_rate``, ``max_steps``,
            ...).
        use_target_kl: stop an update's epochs early once approx KL exceeds ``1.5 * target_kl``
            (``ppo_config["target_kl"]``, default
            :data:`gym_llm.rl.agent_config.DEFAULT_TARGET_KL`); setting
            ``target_kl`` alone does the same.
        max_context_tokens: prompt budget; the oldest user/assistant exchanges are dropped to
            fit, the system prompt and the current observation always stay.
        action_space: the env's action space; actions outside it are invalid. Needed for a random
            fallback and for the parser rules (with ``action_names`` for Discrete).
        action_names: names of Discrete actions for the parser rules (implies
            ``Discrete(len(action_names))`` when ``action_space`` is not given).
        on_invalid: ``"fallback"``: parser rules, then ``fallback_action`` (or a random action)
            with ``invalid_penalty``; ``"raise"``: a ``ValueError`` as soon as
            ``extract_action`` fails.
        lora: LoRA settings (dict or ``peft.LoraConfig``); ``"default"`` = the model's registry
            defaults; ``None`` trains all weights.
        trainable_layers: decoder layers that train, from the top (``LLMPolicy``'s argument):
            ``"auto"`` = a quarter of them with LoRA, all without; an int counts them, a float
            in (0, 1) is a share, ``None`` trains all.
        tensorboard_log: folder for TensorBoard logs (``<folder>/Agent_<n>``); ``None`` = off.
    """

    #: Written to ``agent.json`` so :meth:`load` can refuse foreign directories.
    FORMAT: ClassVar[str] = "gym_llm.Agent/1"

    def __init__(
        self,
        model: str | Any,
        tokenizer: Any = None,
        device: torch.device | str = "auto",
        generate_config: Mapping[str, Any] | None = None,
        ppo_config: Mapping[str, Any] | None = None,
        *,
        generate_config_dict: Mapping[str, Any] | None = None,
        ppo_config_dict: Mapping[str, Any] | None = None,
        sft_warm_start: bool = False,
        sft_demos: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        sft_replay: float = 0.0,
        sft_replay_window: int = 100,
        sft_kwargs: Mapping[str, Any] | None = None,
        use_target_kl: bool = False,
        max_context_tokens: int = 2048,
        action_space: spaces.Space[Any] | None = None,
        action_names: Sequence[str] | None = None,
        on_invalid: OnInvalid = "fallback",
        fallback_action: Any = None,
        invalid_penalty: float = 0.0,
        lora: dict[str, Any] | Any | None = "default",
        tensorboard_log: str | os.PathLike[str] | None = None,
        trainable_layers: TrainableLayers = "auto",
    ) -> None:
        generate, hyper = resolve_configs(
            generate_config, generate_config_dict, ppo_config, ppo_config_dict, use_target_kl
        )
        check_arguments(on_invalid, max_context_tokens, sft_replay, sft_warm_start, sft_demos)
        self.episodes_per_update = int(hyper.pop("episodes_per_update"))
        self.do_sample = bool(generate.get("do_sample", True))
        self.max_context_tokens = int(max_context_tokens)
        self.use_target_kl = use_target_kl
        self.sft_replay = float(sft_replay)
        self.sft_kwargs = dict(sft_kwargs or {})
        self.action_names = tuple(str(n) for n in action_names) if action_names else None
        if action_space is None and self.action_names is not None:
            action_space = spaces.Discrete(len(self.action_names))
        self.action_space = action_space
        #: Reply -> action: extract_action, then the parser rules, then the fallback (shared
        #: with ActionParserWrapper).
        self.resolver = ActionResolver(
            action_space,
            rules=rules_for(action_space, self.action_names),
            extractor=self.extract_action,
            extractor_name="extract_action",
            recover=True,
            on_invalid=on_invalid,
            fallback_action=fallback_action,
            invalid_penalty=invalid_penalty,
        )

        self._system_prompt = self.get_system_prompt()
        policy_kwargs = agent_policy_kwargs(
            model, tokenizer, generate, self._system_prompt, lora, trainable_layers
        )
        mini_batch = int(hyper.pop("mini_batch_size"))
        self.ppo = PPO.from_spaces(
            TextObservations(2**31 - 1),
            TextActions(None),
            batch_size=mini_batch,
            n_steps=1,
            policy_kwargs=policy_kwargs,
            device=device,
            **hyper,
        )
        self.ppo.set_logger(
            learn_logger(
                0, None if tensorboard_log is None else str(tensorboard_log), "Agent", True
            )
        )
        self.policy: LLMPolicy = self.ppo.policy
        self.tokenizer = self.policy.tokenizer
        self.policy.set_training_mode(False)

        self.training = True
        self.episodes: list[Episode] = []
        self.last_rollout: TextRolloutBuffer | None = None
        self._replay: deque[Episode] = deque(maxlen=max(1, int(sft_replay_window)))
        self._counts = Counts()
        self.current_episode_messages: list[Message] = []
        self.current_episode_turns: list[Turn] = []
        self._reset_episode()
        self.sft_stats: dict[str, float] = {}
        if sft_warm_start:
            assert sft_demos is not None
            self.sft_stats = self.warm_start(sft_demos)

    # --- what a subclass writes ----------------------------------------------------------------

    @abc.abstractmethod
    def get_system_prompt(self) -> str:
        """The system message of every episode."""

    @abc.abstractmethod
    def format_observation(self, observation: Any) -> str:
        """The user turn for an env observation."""

    @abc.abstractmethod
    def extract_action(self, response: str) -> Any:
        """The env action for the model's reply. Raising or returning ``None`` (or an action
        outside ``action_space``) makes the agent apply its invalid-action policy."""

    # --- the episode loop ----------------------------------------------------------------------

    @property
    def current_episode_rewards(self) -> list[float]:
        """The reward of each turn so far (env rewards plus invalid-action penalties)."""
        return [t.reward for t in self.current_episode_turns]

    def act(self, observation: Any) -> Any:
        """Add the observation as a user turn, sample a reply, and return its env action."""
        self.current_episode_messages.append(
            {"role": "user", "content": self.format_observation(observation)}
        )
        prompt, dropped = self._prompt()
        deterministic = not (self.training and self.do_sample)
        with torch.inference_mode():
            step = self.policy.act([prompt], deterministic=deterministic)
        reply = step.replies[0]
        self.current_episode_messages.append({"role": "assistant", "content": reply})
        outcome = self.to_action(reply)
        if self.training:  # eval turns are not trained on
            self._counts.add(outcome, dropped)
        self.current_episode_turns.append(
            Turn(
                prompt=prompt,
                reply=reply,
                tokens=step.actions[0],
                log_probs=step.token_log_probs[0],
                value=float(step.values[0]),
                action=outcome.action,
                source=outcome.source,
                reward=outcome.penalty,
                dropped_exchanges=dropped,
                states=step.states[0] if step.states else None,
            )
        )
        return outcome.action

    def assign_reward(self, reward: SupportsFloat) -> None:
        """Credit ``reward`` to the latest turn (several calls add up)."""
        if not self.current_episode_turns:
            raise RuntimeError(
                "assign_reward() was called before act() in this episode: a reward belongs to the "
                "turn whose action earned it."
            )
        self.current_episode_turns[-1].reward += float(reward)

    def terminate_episode(self, train: bool = True) -> dict[str, float]:
        """End the episode; train when ``episodes_per_update`` episodes are collected.

        Returns PPO's logger metrics (``train/approx_kl``, ``train/first_ratio_error``,
        ``train/early_stopped``, ...) plus ``agent/*`` counts when an update ran, else ``{}``.
        In eval mode (:meth:`eval`) episodes are not kept for training.
        """
        episode = Episode(self.current_episode_turns, self.current_episode_messages)
        self._reset_episode()
        if not episode.turns or not self.training:
            return {}
        self.episodes.append(episode)
        if self.sft_replay > 0:
            self._replay.append(episode)
        if train and len(self.episodes) >= self.episodes_per_update:
            return self._update()
        return {}

    def train(self: SelfAgent, mode: bool = True) -> SelfAgent:
        """Training mode: sample replies and keep episodes for updates (the default)."""
        self.training = mode
        return self

    def eval(self: SelfAgent) -> SelfAgent:
        """Inference mode: greedy replies, episodes are not kept for training."""
        return self.train(False)

    # --- prompts and actions -------------------------------------------------------------------

    def _reset_episode(self) -> None:
        self.current_episode_messages = (
            [{"role": "system", "content": self._system_prompt}] if self._system_prompt else []
        )
        self.current_episode_turns = []

    def _prompt(self) -> tuple[str, int]:
        """The conversation without its system message (the policy adds it, so the shared-prefix
        cache finds it), dropping the oldest exchanges until the prompt fits the budget."""
        turns = [m for m in self.current_episode_messages if m["role"] != "system"]
        dropped = 0
        prompt = conversation_json(turns)
        while len(turns) > 1 and len(self.policy.prompt_ids(prompt)) > self.max_context_tokens:
            turns = turns[2:]  # one user/assistant exchange, the oldest
            dropped += 1
            prompt = conversation_json(turns)
        return prompt, dropped

    def to_action(self, reply: str) -> ActionOutcome:
        """The env action for a reply: ``extract_action``, else the parser rules (exact name,
        JSON ``{"action": ...}``, ``Action: X``, last mention; see
        :mod:`gym_llm.wrappers.parsing`), else ``fallback_action`` or a random action with
        ``invalid_penalty``. With ``on_invalid="raise"`` a failing ``extract_action`` raises."""
        return self.resolver.resolve(reply)

    def predict(self, observations: Sequence[Any], batch_size: int = 32) -> list[Any]:
        """Greedy first-turn actions for fresh episodes starting at each observation, in batches
        (for evaluation; the current episode is untouched). ``None`` where neither
        ``extract_action`` nor the parser found a valid action."""
        actions: list[Any] = []
        for start in range(0, len(observations), batch_size):
            prompts = [
                json.dumps(
                    [{"role": "user", "content": self.format_observation(o)}], ensure_ascii=False
                )
                for o in observations[start : start + batch_size]
            ]
            with torch.inference_mode():
                step = self.policy.act(prompts, deterministic=True)
            actions.extend(self.resolver.parse(reply).action for reply in step.replies)
        return actions

    # --- the update ----------------------------------------------------------------------------

    def _update(self) -> dict[str, float]:
        episodes, self.episodes = self.episodes, []
        ppo = self.ppo
        buffer = episodes_buffer(episodes, ppo.device, ppo.gamma, ppo.gae_lambda)
        self.last_rollout = ppo.rollout_buffer = buffer
        ppo.num_timesteps += buffer.buffer_size
        ppo.train()
        logger = ppo.logger
        counts, self._counts = self._counts, Counts()
        agent_stats = episode_stats(episodes, counts)
        if self.sft_replay > 0 and self._replay:
            records = best_episodes(self._replay, self.sft_replay)
            sft = self.warm_start(records, epochs=1)
            agent_stats.update({f"agent/replay_{k.split('/')[-1]}": v for k, v in sft.items()})
            agent_stats["agent/replay_episodes"] = float(len(records))
        for key, value in agent_stats.items():
            logger.record(key, value)
        stats = {
            key: float(value)
            for key, value in logger.name_to_value.items()
            if key.startswith(("train/", "agent/"))
        }
        logger.dump(step=self.ppo.num_timesteps)
        return stats

    def warm_start(
        self, demos: str | os.PathLike[str] | Sequence[Mapping[str, Any]], **kwargs: Any
    ) -> dict[str, float]:
        """Supervised fine-tuning of this agent's policy on chat-messages demonstrations
        (:func:`gym_llm.rl.sft.warm_start`, with ``sft_kwargs`` then ``kwargs``); returns its stats."""
        from gym_llm.rl import sft

        stats = sft.warm_start(self.policy, demos, **{**self.sft_kwargs, **kwargs})
        self.policy.set_training_mode(False)
        return stats

    # --- save / load: PPO.save's directory plus agent.json and the pending episodes ---------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the checkpoint (see the module). The episode in progress is not kept: finish
        it (``terminate_episode``) before saving. The base weights only where nothing else
        names them (an agent built from a model object: ``base_model/``)."""
        episodes = episodes_json(self.episodes, self._replay, self._counts)
        self.ppo.save(path, extra_json={"agent.json": agent_json(self), EPISODES_FILE: episodes})

    @classmethod
    def load(
        cls: type[SelfAgent],
        path: str | os.PathLike[str],
        device: torch.device | str = "auto",
        **kwargs: Any,
    ) -> SelfAgent:
        """Rebuild an agent saved by :meth:`save` (call it on your subclass:
        ``BlackjackAgent.load(dir)``). ``kwargs`` override saved constructor arguments, e.g.
        ``action_space=`` for a non-Discrete space, ``tensorboard_log=``, or ``model=`` when the
        base model moved."""
        directory = agent_path(path)
        arguments = {**saved_arguments(directory, cls.FORMAT), "device": device}
        arguments.update(kwargs)
        agent = cls(**arguments)
        agent.ppo.load_policy_state(directory)
        if (directory / EPISODES_FILE).is_file():  # older agents had no pending episodes
            agent.episodes, replay, agent._counts = read_episodes(directory / EPISODES_FILE)
            agent._replay.extend(replay)
        return agent
