"""The offline judge: agreement with the human-labelled cases, determinism, what it reports."""
from __future__ import annotations

import subprocess
import sys

import pytest
from ctxprec.scorer.judge.local import LocalJudge
from ctxprec.scorer.judge.local_eval import SETS, evaluate, load_cases
from ctxprec.scorer.judge.chat import RequestEvent
from ctxprec.scorer.judge.local_lang import identify, identify_context
from ctxprec.scorer.judge.local_text import STRONG, stem, terms
from ctxprec.scorer.judge.local_words import parse, word_data

EN, FR, DE, JA, ZH, KO = (identify(text) for text in (
    "Who discovered penicillin? Alexander Fleming did, in 1928.",
    "Qui a découvert la pénicilline ? C'est Fleming, en 1928.",
    "Wer hat das Penicillin entdeckt? Das war Alexander Fleming im Jahr 1928.",
    "ペニシリンを発見したのは誰ですか？", "谁发现了青霉素？", "페니실린은 누가 발견했나요?"))


def test_labelled_set_is_big_enough_and_balanced() -> None:
    cases = load_cases()
    labels = [label for case in cases for label in case["labels"]]
    assert len(cases) >= 40 and len(labels) >= 200
    assert 0.3 < labels.count("relevant") / len(labels) < 0.7

def test_agreement_with_human_labels_is_at_least_85_percent() -> None:
    result = evaluate()
    assert result.rate >= 0.85, "\n".join(result.disagreements)
    # Both classes must be judged well, not one at the expense of the other.
    assert result.true_pos / (result.true_pos + result.false_neg) >= 0.8
    assert result.true_neg / (result.true_neg + result.false_pos) >= 0.8

def test_cli_prints_agreement_per_set_and_split() -> None:
    out = subprocess.run([sys.executable, "-m", "ctxprec.scorer.judge.local_eval"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == set(SETS)
    # The original set's row carries its own size: 46 cases, 231 contexts.
    assert rows["original"][1:3] == ["46", "231"]
    assert all(row[3].endswith("%") for row in rows.values())

async def test_verdicts_are_deterministic_and_say_they_are_local() -> None:
    judge = LocalJudge()
    case = load_cases()[0]
    first = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    second = await judge.judge(case["question"], case["contexts"], reference_kind="output", reference=case["answer"])
    assert first.verdicts == second.verdicts
    assert all(v.reason.startswith("local judge: ") for v in first.verdicts)
    assert first.usage.calls == 0 and first.usage.prompt_tokens == 0

async def test_numbers_and_answer_specific_words_decide() -> None:
    judge = LocalJudge()
    outcome = await judge.judge(
        "How tall is the Eiffel Tower?",
        ["The Eiffel Tower stands 330 metres tall.", "The Eiffel Tower was built by Gustave Eiffel's company."],
        reference_kind="output",
        reference="The Eiffel Tower is 330 metres tall.",
    )
    # Echoing the query's words (Eiffel, Tower) is on topic but does not support the answer.
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "330" in outcome.verdicts[0].reason

async def test_query_only_reference() -> None:
    outcome = await LocalJudge().judge(
        "symptoms of vitamin D deficiency",
        ["Vitamin D deficiency symptoms include bone pain.", "Parking is free on Sundays."],
        reference_kind="query",
        reference="",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "only the query was compared" in outcome.verdicts[0].reason

def test_stemming_and_terms() -> None:
    assert stem("produces", "en") == stem("produced", "en") == stem("producing", "en") == stem("produce", "en")
    assert stem("batteries", "en") == stem("battery", "en")
    t = terms("Costs rose to 7,500 dollars, said Alice.", EN)
    assert t.weights["7500"] == STRONG and "7500" in t.numbers
    assert t.weights[stem("alice", "en")] == STRONG  # a name mid-sentence carries a fact
    assert not terms("the a of", EN).weights
    # Spelled-out numbers meet digits; a lone capital mid-sentence names something.
    assert "12" in terms("at least twelve characters", EN).numbers
    assert "d_" in terms("We need vitamin D daily.", EN).weights


def test_french_elision_accents_and_stems() -> None:
    words = terms("L'eau de la mer s'évapore ; qu'elle est salée ! Les éléments", FR).weights
    assert "eau" in words and "mer" in words  # l'eau -> eau; stopwords (de, la, est) gone
    assert not {"de", "la", "est", "les", "qu", "l"} & set(words)
    assert stem("réinitialiser", "fr") == stem("reinitialisation", "fr")  # accents folded, endings cut
    assert terms("les éléments", FR).weights.keys() == terms("les elements", FR).weights.keys()
    # French decimals use a comma; thousands a space.
    assert {"42.195", "1665"} <= terms("42,195 km et 1 665 marches", FR).numbers


def test_every_language_has_its_analyser() -> None:
    de = terms("Die Bücher wurden 1897 von der Stadtbibliothek gekauft.", DE)
    assert stem("Buch", "de") in de.weights and "1897" in de.numbers and "der" not in de.weights
    assert "10100" in terms("Der Turm wiegt 10.100 Tonnen.", DE).numbers  # a dot groups thousands
    zh = terms("逾期图书每册每天收取 0.2 元。", ZH)
    assert {"逾期", "图书"} <= set(zh.weights) and "0.2" in zh.numbers  # jieba's words, not characters
    ja = terms("健太は期末試験で数学と化学が赤点だった。", JA)
    assert {"試験", "数学", "化学"} <= set(ja.weights) and not {"は", "で", "と"} & set(ja.weights)
    ko = terms("민수는 기말고사에서 수학과 화학 과목에 낙제점을 받았다.", KO)
    assert {"수학", "화학", "기말고사"} <= set(ko.weights) and not {"는", "에서"} & set(ko.weights)


def test_clock_times_and_figures_are_normalised() -> None:
    assert terms("Saturday: 9:00 am - 1:00 pm", EN).values["time"] == {"t9:00", "t13:00"}
    assert terms("de 9 h à 13 h", FR).values["time"] == {"t9:00", "t13:00"}
    assert "t23:40" in terms("最終電車は 23 時 40 分に出る", JA).values["time"]
    # "11:00" is one clock time: it does not meet "10:00" on "00".
    assert not terms("Open at 11:00.", EN).weights.keys() & terms("Open at 10:00.", EN).weights.keys() - {"open"}
    assert terms("Python 3.10 and 7,500 users", EN).values["number"] == {"3.10", "7500"}
    assert "15" not in terms("in the 15th century", EN).numbers


def test_language_is_told_per_text() -> None:
    assert (EN.code, FR.code, DE.code, JA.code, ZH.code, KO.code) == ("en", "fr", "de", "ja", "zh", "ko")
    assert identify("Москва — столица России.").script == "Cyrillic"
    assert identify("Hur lång är Eiffeltornet? Det är 330 meter högt.").code == "sv"
    # A context keeps the sample's language unless it clearly reads as another one.
    assert identify_context("Pro: 29 €/mes.", identify("¿Cuánto cuesta el plan Pro? Cuesta 29 € al mes.")).code == "es"
    assert identify_context("Das Rathaus mit seinem Uhrturm wurde 1902 fertiggestellt.", EN).code == "de"


def test_word_data_files_are_well_formed() -> None:
    for language in ("en", "de", "es", "pt", "fr", "it", "nl", "zh", "ja", "ko"):
        data = word_data(language)
        assert data.negation, language
        assert language in ("ja",) or data.stopwords, language
        for group in data.synonyms:
            assert len(group) >= 2 and all(len(m.split()) <= 3 for m in group), group
    with pytest.raises(ValueError, match="line 2: unknown section"):
        parse("# x\n[stopword]\nthe\n", "en")
    with pytest.raises(ValueError, match=r"line 2: \[forms\] takes two words"):
        parse("[forms]\nstolen\n", "en")


async def test_reference_style_supporting_fact_is_relevant() -> None:
    outcome = await LocalJudge().judge(
        "Who discovered penicillin?",
        ["Fleming noticed mould killing the bacteria in a petri dish.",
         "Penicillin allergies cause a rash in some patients.",
         "The Eiffel Tower is repainted every seven years."],
        reference_kind="output",
        reference="Alexander Fleming discovered penicillin in 1928.",
    )
    # The supporting fact names the answer's discoverer; the topical distractor only echoes the query.
    assert [v.relevant for v in outcome.verdicts] == [True, False, False]
    assert "fleming" in outcome.verdicts[0].reason


async def test_french_and_japanese_samples() -> None:
    fr = await LocalJudge().judge(
        "Quelle est la capitale de l'Australie ?",
        ["Canberra a été choisie comme compromis entre Sydney et Melbourne.", "Les kangourous sautent très vite."],
        reference_kind="output", reference="La capitale de l'Australie est Canberra.")
    ja = await LocalJudge().judge(
        "オーストラリアの首都はどこですか？",
        ["キャンベラはシドニーとメルボルンの妥協案として首都に選ばれた。", "カンガルーは速く跳ぶ。"],
        reference_kind="output", reference="オーストラリアの首都はキャンベラです。")
    assert [v.relevant for v in fr.verdicts] == [True, False]
    assert [v.relevant for v in ja.verdicts] == [True, False]
    assert all(v.reason.startswith("local judge: ") and "language-independent" not in v.reason
               for v in fr.verdicts + ja.verdicts)


async def test_unsupported_languages_and_other_language_contexts_use_the_fallback_and_say_so() -> None:
    events: list[RequestEvent] = []
    judge = LocalJudge(observer=events.append)
    ru = await judge.judge(
        "Какая столица Австралии?",
        ["Канберра была выбрана столицей как компромисс.", "Кенгуру быстро прыгают."],
        reference_kind="output", reference="Столица Австралии — Канберра.")
    assert [v.relevant for v in ru.verdicts] == [True, False]
    assert all("judged by language-independent overlap" in v.reason and "without word rules" in v.reason
               for v in ru.verdicts)
    mixed = await judge.judge(
        "When was the town hall built?",
        ["Das Rathaus mit seinem Uhrturm wurde 1902 fertiggestellt.", "The town hall was finished in 1902."],
        reference_kind="output", reference="The town hall was finished in 1902.")
    assert [v.relevant for v in mixed.verdicts] == [True, True]
    assert "context in German, answer in English" in mixed.verdicts[0].reason
    assert "language-independent" not in mixed.verdicts[1].reason
    assert [e.local_fallbacks for e in events] == [
        ("unsupported_language", "unsupported_language"), ("language_mismatch",)]


async def test_distractors_with_other_figures_rows_or_a_denial_are_not_support() -> None:
    judge = LocalJudge()

    async def verdicts(query: str, answer: str, *contexts: str) -> list[bool]:
        outcome = await judge.judge(query, list(contexts), reference_kind="output", reference=answer)
        return [v.relevant for v in outcome.verdicts]

    assert await verdicts("What is the current price of the Pro plan?", "The Pro plan costs $29 per month.",
                          "Pro: $29/month, billed monthly.", "Pro: $19/month (price valid until 31 March 2023).") == [True, False]
    assert await verdicts(
        "When does Django 4.2 LTS stop getting security fixes?", "Django 4.2 LTS receives security updates until April 2026.",
        "Django 4.2 is an LTS release; security fixes will be provided until April 2026.",
        "Django 5.0 receives security fixes until April 2025.") == [True, False]
    assert await verdicts(
        "What is the maximum upload size on the Business plan?", "The Business plan allows uploads of up to 5 GB per file.",
        "| Business | 5 GB per file | 1 TB storage |", "| Free | 100 MB per file | 5 GB storage |") == [True, False]
    assert await verdicts(
        "Who discovered penicillin?", "Alexander Fleming discovered penicillin in 1928.",
        "In 1928 Fleming noticed that a mould had killed the bacteria around it.",
        "Penicillin was not discovered by Louis Pasteur, who died in 1895.") == [True, False]
    assert await verdicts(
        "How do I undo the last git commit but keep the changes?", "Run git reset --soft HEAD~1; the changes stay staged.",
        "git reset --soft HEAD~1 moves the branch back one commit and keeps your changes.",
        "git reset --hard HEAD~1 discards the last commit and all of its changes.") == [True, False]
    reason = (await judge.judge("What time does the museum open on Saturdays?", ["Late opening on Thursdays until 21:00."],
                                reference_kind="output", reference="On Saturdays the museum opens at 10:00.")).verdicts[0]
    assert not reason.relevant and "00" not in reason.reason.split("found:")[1].split("(")[0]


async def test_long_contexts_are_judged_sentence_pair_by_sentence_pair() -> None:
    filler = ("The town grew after the railway came. A market hall opened in 1874. The town hall has a clock tower. "
              "Several mills closed in the last century. ")
    outcome = await LocalJudge().judge(
        "When was the library founded?", [filler + "The library was founded in 1887 by a mill owner.", filler],
        reference_kind="output", reference="The library was founded in 1887.")
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "1887" in outcome.verdicts[0].reason


@pytest.mark.parametrize(("name", "floor"), [
    ("original", 0.95), ("en-dev", 0.92), ("en-heldout", 0.915), ("fr-dev", 0.92), ("fr-heldout", 0.91),
    ("ja-dev", 0.94), ("ja-heldout", 0.875), ("en-dev2", 0.86), ("fr-dev2", 0.88), ("ja-dev2", 0.9),
    ("en-dev3", 0.89), ("en-heldout2", 0.86), ("fr-dev3", 0.84), ("fr-heldout2", 0.83), ("ja-dev3", 0.79),
    ("ja-heldout2", 0.81), ("de-dev", 0.88), ("de-heldout", 0.86), ("es-dev", 0.93), ("es-heldout", 0.91),
    ("pt-dev", 0.88), ("pt-heldout", 0.83), ("it-dev", 0.96), ("it-heldout", 0.77), ("nl-dev", 0.94),
    ("nl-heldout", 0.89), ("zh-dev", 0.89), ("zh-heldout", 0.84), ("ko-dev", 0.84), ("ko-heldout", 0.86),
    ("mixed-dev", 1.0), ("mixed-heldout", 0.87)])
def test_agreement_on_every_labelled_set_stays_above_its_floor(name: str, floor: float) -> None:
    # Floors a little under the measured figures (docs/LOCAL_JUDGE.md): a change that loses
    # agreement on any set, held-out ones included, fails here.
    result = evaluate(load_cases(name))
    assert result.rate >= floor - 1e-9, "\n".join(result.disagreements)


def test_sets_are_big_enough_and_split() -> None:
    english = load_cases("en-dev") + load_cases("en-heldout")
    assert len(english) >= 150 and sum(len(c["contexts"]) for c in english) >= 600
    for language in ("fr", "ja"):
        assert len(load_cases(f"{language}-dev")) + len(load_cases(f"{language}-heldout")) >= 40
    for language in ("en", "fr", "ja"):  # no question in a development split and the held-out one
        dev = {c["question"] for name in (f"{language}-dev", f"{language}-dev2") for c in load_cases(name)}
        assert not dev & {c["question"] for c in load_cases(f"{language}-heldout")}


STYLES = ("paraphrase", "low-overlap", "numbers", "table", "code", "faq", "domain", "long", "near-duplicate",
          "negation", "multi-hop")
THIRD_ROUND = {"en": ("en-dev3", "en-heldout2"), "fr": ("fr-dev3", "fr-heldout2"), "ja": ("ja-dev3", "ja-heldout2"),
               **{lang: (f"{lang}-dev", f"{lang}-heldout") for lang in ("de", "es", "pt", "it", "nl", "zh", "ko")}}


def test_third_round_sets_cover_every_style_and_language_in_both_splits() -> None:
    for language, names in THIRD_ROUND.items():
        for name in names:
            cases = load_cases(name)
            assert {c["language"] for c in cases} == {language}, name
            styles = [c["style"] for c in cases]
            if language == "en":
                assert len(cases) >= 60 and all(styles.count(style) >= 4 for style in STYLES), name
            else:
                assert len(cases) >= 15 and set(styles) == set(STYLES), name
    # No question, in any language, is in a development split and a held-out one.
    dev = {c["question"].strip().lower() for name in SETS if "heldout" not in name for c in load_cases(name)}
    heldout = {c["question"].strip().lower() for name in SETS if "heldout" in name for c in load_cases(name)}
    assert not dev & heldout


def test_local_scorer_needs_no_network() -> None:
    # A socket guard in a child process: any connection attempt would raise.
    code = (
        "import socket\n"
        "def refuse(*a, **k):\n    raise RuntimeError('network used')\n"
        "socket.socket.connect = refuse\nsocket.create_connection = refuse\n"
        "from ctxprec.scorer import create_context_precision_scorer\n"
        "s = create_context_precision_scorer(context=['Insulin lowers blood sugar.', 'Cats purr.'])\n"
        "r = s.run_sync('What does insulin do?', 'Insulin lowers blood sugar.')\n"
        "print(r.score, r.verdicts[0].relevant, r.verdicts[1].relevant)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.0", "True", "False"]


def test_stemmer_joins_derivations_irregulars_and_spellings() -> None:
    assert stem("activation", "en") == stem("activate", "en") == stem("activity", "en")
    assert stem("invasion", "en") == stem("invaded", "en")  # a derivation from the word data
    assert stem("stolen", "en") == stem("theft", "en") == stem("steal", "en")  # irregular forms
    assert stem("children", "en") == stem("child", "en")
    assert stem("colour", "en") == stem("color", "en") and stem("organisation", "en") == stem("organization", "en")
    assert stem("slower", "en") == stem("slow", "en") and stem("bigger", "en") == stem("big", "en")
    assert stem("flower", "en") != stem("flow", "en")  # a flower is not a comparative
    assert stem("joyeuses", "fr") == stem("joyeux", "fr") and stem("laver", "fr") == stem("lavez", "fr")


def test_acronyms_code_and_alphanumeric_tokens() -> None:
    t = terms("Replace old bulbs with LEDs; use sorted(x) or list.sort(); plants take in CO2.", EN)
    assert "led" in t.weights  # not "lead": an acronym is not stemmed
    assert {"sorted()", "sort()"} <= set(t.values["code"]) and t.weights["sort()"] == STRONG
    assert "co2" in t.weights


def test_french_names_after_elision_are_names() -> None:
    t = terms("La France est frontalière de l'Espagne.", FR)
    assert t.weights[stem("espagne", "fr")] == STRONG


async def test_synonyms_count_as_the_answers_words_and_say_so() -> None:
    outcome = await LocalJudge().judge(
        "What should I do if my dog eats chocolate?",
        ["Phone a veterinarian immediately; quick treatment matters.", "Labradors are a popular breed."],
        reference_kind="output",
        reference="Call your vet straight away and tell them how much chocolate your dog ate.",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "veterinarian ≈ vet" in outcome.verdicts[0].reason and "phone ≈ call" in outcome.verdicts[0].reason


async def test_small_figures_counting_the_same_thing_conflict() -> None:
    outcome = await LocalJudge().judge(
        "How long does standard shipping take?",
        ["Standard orders arrive in 3 to 5 business days.", "Express shipping delivers in 1-2 business days."],
        reference_kind="output",
        reference="Standard shipping takes 3 to 5 business days.",
    )
    assert [v.relevant for v in outcome.verdicts] == [True, False]
    assert "figures differ" in outcome.verdicts[1].reason


def test_odd_text_never_breaks_the_judge() -> None:
    # Lone surrogates (JSON escapes), NULs, emoji only, scripts mixed in one text, impossible clock
    # times: every context still gets a verdict with a reason.
    judge = LocalJudge()
    odd = ["", "\ud800 broken surrogate", "🙂🙂🙂", "東京\x00タワー", "١٢٣ مرحبا", "| | | |", "12:99, 25:00 and 9 am - 13 pm",
           "한국어 English 日本語 中文 mixed", "가" * 3000]
    for text in odd:
        outcome = judge.judge_sync(text or "q", odd, reference_kind="output", reference=text)
        assert len(outcome.verdicts) == len(odd)
        assert all(v.reason.startswith("local judge: ") for v in outcome.verdicts)
