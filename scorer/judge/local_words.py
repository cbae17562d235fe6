"""Word lists and light stemmers for the local judge (English, French, a few Japanese words).

Stopwords are dropped. Weak words are kept but weigh little: they turn up in text about
anything (`time`, `people`, `make`, units), so sharing one of them is no sign that a context
supports an answer. Number words become digits so that "twelve characters" meets "12 characters".
The lists are general-purpose, not drawn from any labelled case."""
from __future__ import annotations

EN_STOPWORDS = frozenset(
    """
    a about above across after again against all almost along already also although always am
    among an and another any anyone anything are around as at be because been before being below
    between both but by can cannot could did do does doing done down during each either else etc
    even ever every everything few for from further get gets getting got had has have having he
    her here hers herself him himself his how however i if in into is it its itself just less let
    like lot made make makes many may me might more most much must my myself near need needs no
    nor not now of off often on once one only onto or other others our ours ourselves out over own
    per quite rather really same say says shall she should since so some something such than that
    the their theirs them themselves then there therefore these they thing things this those though
    through thus to too toward towards under unless until up upon us use used uses using usually
    very via was way we well were what whatever when where whereas whether which while who whom
    whose why will with within without would yes yet you your yours yourself yourselves
    mine i'm it's don't doesn't isn't aren't can't won't there's that's
    """.split()
)

EN_WEAK = frozenset(
    """
    time times year years day days week weeks month months hour hours minute minutes second seconds
    today tomorrow yesterday people person man men woman women child children part parts place
    places world number numbers kind kinds type types side sides end ends group groups case cases
    point points fact facts area areas example examples form forms level levels order line lines
    home life new old good bad best better great big small large little long short high low full
    whole main major different certain common general special simple easy easier hard real true
    possible able free open clear right left early late next last first third several various
    take takes took taken give gives gave given go goes went gone come comes came see saw seen
    know knew known think thought find found keep kept put set show shows shown turn turns start
    starts help helps work works call calls try ask feel become became leave include includes
    including follow allow allows add lose run runs tell told look looks want mean means seem seems
    happen happens provide provides change changes move moves stay live bring hold begin began
    hundred thousand million billion dozen half metre metres meter meters km kg cm mm g m
    percent cent around about total average
    cause causes caused check checks checked checking reason reasons result results
    """.split()
)

FR_STOPWORDS = frozenset(
    """
    a à afin ai aie aient aies ait alors as au aucun aucune aupres auquel aussi autre autres aux
    auxquels avaient avais avait avant avec avez aviez avions avoir avons ayant bien c ca car ce ceci
    cela celle celles celui cependant certain certaine certains ces cet cette ceux chaque chez ci
    comme comment d dans de depuis des desquels dessous dessus donc dont du duquel durant elle elles
    en encore entre es est et etaient etais etait etant ete etre eu eue eux fais fait faites fut
    ici il ils j je jusqu l la laquelle le lequel les lesquels leur leurs lors lorsqu lui m ma mais
    me meme memes mes moi mon n ne ni nos notre nous on ont ou où par parce parmi pas pendant peu
    peut peuvent plus pour pourquoi pourtant puis qu quand que quel quelle quelles quels qui quoi s
    sa sans se selon ses si soi soit son sont sous suis sur t ta tandis te tes toi ton tous tout
    toute toutes tres très tu un une unes uns vers vos votre vous y
    combien quelque quelques ainsi chacun chacune etc
    """.split()
) | frozenset(
    # Accents are folded before the look-up, so the folded spellings must be here too.
    "a aupres deja ete etre tres ou meme memes".split()
)

FR_WEAK = frozenset(
    """
    temps an ans annee annees jour jours semaine semaines mois heure heures minute minutes seconde
    secondes aujourd hui demain hier personne personnes gens homme hommes femme femmes enfant enfants
    chose choses facon partie parties lieu monde nombre type types cas exemple exemples forme niveau
    nouveau nouvelle nouveaux bon bonne bons mauvais grand grande grands grandes petit petite petits
    long longue haut bas premier premiere dernier derniere plusieurs beaucoup moins faire font
    prendre donner aller venir voir savoir mettre trouver rester devenir passer utiliser permettre
    permet dire cent mille million millions milliard environ metre metres km kg cm mm
    cause causes raison raisons resultat resultats verifier
    """.split()
)

# Single kanji and kanji pairs that turn up in text about anything: counters, time, "method".
JA_WEAK = frozenset(
    """
    年 月 日 時 分 秒 人 者 方 中 上 下 前 後 間 円 個 回 度 本 的 性 化 大 小 多 少 高 低 長 新 古 一 二 三 十 百 千 万
    時間 一日 毎日 場合 方法 以上 以下 以内 必要 世界 今日 明日 約 数 全 各 他 等 何 誰
    メートル キロ キロメートル グラム キログラム センチ ミリ パーセント トン リットル カロリー
    """.split()
)

_EN_NUMBERS = {
    "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
    "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14", "fifteen": "15",
    "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30",
    "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
}
_FR_NUMBERS = {
    "deux": "2", "trois": "3", "quatre": "4", "cinq": "5", "six": "6", "sept": "7", "huit": "8", "neuf": "9",
    "dix": "10", "onze": "11", "douze": "12", "treize": "13", "quatorze": "14", "quinze": "15", "seize": "16",
    "vingt": "20", "trente": "30", "quarante": "40", "cinquante": "50", "soixante": "60",
}

def number_word(word: str, french: bool) -> str | None:
    """The digits a spelled-out number stands for, or None."""
    return (_FR_NUMBERS if french else _EN_NUMBERS).get(word)
