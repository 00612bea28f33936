from specdecode.app.train.vocab import coverage, select_draft_vocab


def test_draft_vocab_is_the_most_frequent_answer_ids_sorted():
    answers = [[5, 5, 5, 7, 7, 2], [7, 5, 9]]
    assert select_draft_vocab(answers, [], 2, vocab_size=16) == [5, 7]  # 5: 4x, 7: 3x


def test_prompt_counts_break_answer_ties_and_fill_unseen_ids():
    answers = [[3, 4]]  # 3 and 4 tie in the answers
    prompts = [[4, 4, 9, 9, 9, 1]]
    # 4 wins the tie by its prompt count; then 9 (prompts only) beats 1
    assert select_draft_vocab(answers, prompts, 2, vocab_size=16) == [3, 4]
    assert select_draft_vocab(answers, prompts, 3, vocab_size=16) == [3, 4, 9]


def test_remaining_ties_go_to_the_lower_id():
    assert select_draft_vocab([[6, 2]], [], 1, vocab_size=8) == [2]


def test_zero_or_full_size_means_the_full_vocabulary():
    assert select_draft_vocab([[1]], [], 0, vocab_size=8) is None
    assert select_draft_vocab([[1]], [], 8, vocab_size=8) is None


def test_coverage_is_the_fraction_of_answer_tokens_inside():
    assert coverage([1, 2], [[1, 2, 3, 3]]) == 0.5
    assert coverage(None, [[1, 2, 3]]) == 1.0
