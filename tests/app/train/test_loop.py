import pytest
import torch
from train_helpers import tiny_sequences, tiny_target

from specdecode.app.train.loop import CHECKPOINT_FILE, TrainSettings, evaluate, lr_factor, train
from specdecode.app.train.objectives import EagleObjective, MedusaObjective, collate
from specdecode.models.heads import EagleHead, MedusaHeads, load_head, save_head


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    target = tiny_target(tiny_llama)
    return target, tiny_sequences(target, 12)


def _eagle(target, vocab=None, seed=0):
    torch.manual_seed(seed)
    cfg = target.layer_shape()
    if vocab:
        cfg["draft_vocab"] = vocab
    return EagleHead(cfg)


def _medusa(target, heads=3):
    return MedusaHeads({"hidden_size": target.hidden_size, "num_heads": heads})


def test_only_predictions_of_answer_tokens_count(tiny):
    target, sequences = tiny
    batch = collate(sequences[:3])
    answers = (batch.lengths - batch.prompt_lengths).sum().item()  # prompts have >= 4 tokens
    eagle = EagleObjective(target, None)(_eagle(target), batch)
    assert eagle.counted.tolist() == [answers]
    medusa = MedusaObjective(target, None)(_medusa(target), batch)
    assert medusa.counted.tolist() == [answers] * 3  # head k at t = p-1-k predicts x_p


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_loss_decreases_when_training_a_tiny_model(tiny, tmp_path, kind):
    target, sequences = tiny
    vocab = list(range(0, 64, 2)) + [1, 3]
    head = _eagle(target, vocab) if kind == "eagle" else _medusa(target)
    objective = (EagleObjective if kind == "eagle" else MedusaObjective)(target, sorted(vocab))
    before = evaluate(head, objective, sequences, 4)
    history = train(head, objective, sequences, sequences, TrainSettings(epochs=30, lr=5e-3, batch_size=4),
                    tmp_path, progress=False)
    after = evaluate(head, objective, sequences, 4)
    assert after["val_loss"] < 0.7 * before["val_loss"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert after["val_accuracy"][0] > before["val_accuracy"][0]


class _InterruptAfter:
    """An objective that raises KeyboardInterrupt on its n-th call (training and evaluation)."""

    def __init__(self, objective, calls: int) -> None:
        self.objective, self.left = objective, calls

    def __call__(self, *args):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        return self.objective(*args)


def test_interrupted_training_resumes_from_its_checkpoint_at_the_next_epoch(tiny, tmp_path):
    target, sequences = tiny
    train_data, val_data = sequences[:9], sequences[9:]
    objective = EagleObjective(target, None)
    settings = TrainSettings(epochs=3, lr=1e-3, batch_size=4, seed=5)
    whole = _eagle(target)
    train(whole, objective, train_data, val_data, settings, tmp_path / "whole", progress=False)

    head = _eagle(target)
    # an epoch is 3 training batches + 1 validation batch: stop during epoch 2's training
    with pytest.raises(KeyboardInterrupt):
        train(head, _InterruptAfter(objective, 4 + 2), train_data, val_data, settings,
              tmp_path / "cut", progress=False)
    assert len(torch.load(tmp_path / "cut" / CHECKPOINT_FILE, weights_only=True)["history"]) == 1

    epochs_run = []
    resumed = _eagle(target, seed=123)  # other initial weights: the checkpoint must replace them
    history = train(resumed, objective, train_data, val_data, settings, tmp_path / "cut",
                    progress=False, on_epoch_end=lambda epoch, _: epochs_run.append(epoch))
    assert epochs_run == [2, 3]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=1e-6)


def test_learning_rate_warms_up_then_decays_to_zero():
    factors = [lr_factor(s, total=20, warmup=4) for s in range(20)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(factors[3:], factors[4:]))
    assert factors[-1] == pytest.approx(0.0, abs=0.01)


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_a_trained_head_round_trips_through_save_and_load(tiny, tmp_path, kind):
    target, sequences = tiny
    vocab = list(range(32))
    head = _eagle(target, vocab) if kind == "eagle" else _medusa(target, heads=2)
    if kind == "medusa":
        head.cfg["draft_vocab"] = vocab
        head = MedusaHeads(head.cfg)
    objective = (EagleObjective if kind == "eagle" else MedusaObjective)(target, vocab)
    train(head, objective, sequences, sequences, TrainSettings(epochs=1, lr=1e-3, batch_size=4),
          tmp_path, progress=False)
    save_head(head, tmp_path / "head", {"target": "tiny", "training": {"epochs": 1}})
    loaded = load_head(tmp_path / "head", kind)
    assert loaded.cfg["draft_vocab"] == vocab and loaded.cfg["training"] == {"epochs": 1}
    assert loaded.draft_vocab.tolist() == vocab
    # saved in bf16: the loaded head is the trained one with its weights rounded to bf16
    head.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in head.state_dict().items()})
    batch = collate(sequences[:2])
    with torch.no_grad():
        assert torch.equal(objective(loaded, batch).loss, objective(head, batch).loss)
