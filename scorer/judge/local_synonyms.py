"""Small groups of words that mean the same thing in the texts a RAG answer is checked against.

A supporting context often says in other words what the answer says: "phone a veterinarian"
for "call your vet", "stolen" for "theft". Stemming cannot join those; a group can. Each line
below is one group: near-synonyms, or a general word and the everyday word people use for it
("vet" / "veterinarian"), comma-separated; a member may be a phrase of up to three words
("straight away"). Groups hold very common words of everyday and technical writing (health,
money, travel, work, computers, nature, time), written from general knowledge, not from any
labelled case; a handful were added after reading misses on the development splits
(docs/LOCAL_JUDGE.md says which kind of word).

A match through a group counts for less than the same word (`Rules.synonym` in local.py): a
group joins words that *can* mean the same thing, and a topical distractor may use one too.

English and French members are stemmed like the text they meet; Japanese members are found as
substrings of the text (there are no spaces to split on), so a member is written in the form
its words take before any kana ending ("盗ま" meets 盗まれた and 盗まれる)."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

EN_GROUPS = """
call, phone, telephone, ring, contact, get in touch
doctor, physician, gp, medic, clinician
vet, veterinarian, veterinary, animal hospital
immediately, straight away, right away, at once, promptly, urgently, without delay, asap
quick, fast, rapid, swift, speedy, quickly, rapidly
big, large, huge, enormous, vast, massive, giant
tiny, minute, minuscule
begin, commence, launch, initiate, onset, kick off
finish, cease, terminate, halt, conclude
buy, purchase, acquire
cost, price, fee, charge, expense
pay, payment, paying
money, cash, funds, currency, coinage, coins, coin
rich, wealthy, affluent, prosperous
poor, poverty, impoverished, destitute, needy
job, employment, career, occupation, profession, employer, employee, hiring, hire, recruiter, recruit, workplace, staff
help, assist, aid, assistance
answer, reply, respond, response
choose, select, pick, choice, option
need, require, requirement, necessary, essential
important, crucial, vital, critical, essential
danger, dangerous, hazard, hazardous, risky, harmful, unsafe, perilous
poison, poisoning, poisonous, toxic, toxin, toxicity
safe, secure, harmless
protect, guard, shield, defend, safeguard, protection
prevent, avoid, stop, block
sick, ill, unwell, nausea, nauseous, queasy
vomit, vomiting, throw up, being sick, retch
illness, disease, sickness, disorder, ailment, condition
symptom, sign, indication
pain, ache, hurt, sore, painful, aching
tired, tiredness, fatigue, fatigued, exhausted, exhaustion, weary, drowsy, lethargy, lethargic
dizzy, dizziness, light-headed, lightheaded, lightheadedness, vertigo, faint, giddy
thirst, thirsty, parched
urine, urinate, urination, pee, wee
drink, fluid, liquid, beverage, hydrate, hydration
eat, consume, ingest, swallow, swallowed
food, nutrition, diet, nutrient, nourishment
medicine, medication, drug, remedy, pill, tablet
treatment, therapy, cure, heal, treat
hospital, clinic, emergency room
heart, cardiac, heartbeat, pulse, heart rate
brain, mind, cerebral, mental
memory, recall, remember, memorise, memorize, retention
attention, concentration, concentrate, focus
sunscreen, sun cream, sunblock, suncream, spf
swimsuit, swimwear, bathing suit, swimming costume, swim shorts, trunks, bikini
towel, dry off
sunglasses, shades
luggage, suitcase, baggage
travel, trip, journey, voyage, tourism, traveller, traveler, abroad, overseas
holiday, vacation
car, vehicle, automobile
bike, bicycle, cycling
plane, aircraft, airplane, aeroplane, airliner
boat, ship, vessel
house, home, residence, dwelling
town, city, urban
country, nation, countries
government, administration, authorities, regime, political, politics, politician, statesman
law, legislation, statute
king, monarch, ruler, emperor, sovereign, queen
war, conflict, battle, warfare, fighting
army, military, troops, soldiers
invade, invasion, invader, attack, raid, sack, sacked, plunder, pillage, loot, overrun
kill, murder, assassinate, assassination, slay, slain
death, die, dead, perish, fatal, deadly, lethal
decline, decrease, drop, reduce, reduction, shrink, dwindle, diminish, fall, falling, weaken
increase, rise, grow, growth, boost, raise, climb, surge, soar
economy, economic, finance, financial, fiscal, treasury, budget
tax, taxation, taxes, levy
debt, loan, borrow, owe, borrowing
bank, lender
trade, commerce, commercial, import, export, tariff
shop, store, retailer
customer, client, buyer, consumer, shopper
company, business, firm, corporation, enterprise
stock market, share prices, shares, stocks, equities, wall street
crash, collapse, plunge, slump
fail, failure, break, broken, breakdown, malfunction, faulty, crash, die
mistake, error, accidental, accidentally, by mistake, inadvertent, unintentional
delete, deletion, remove, erase, wipe
file, document
computer, laptop, desktop, pc
hard drive, hard disk, disk, drive, ssd, storage
backup, back up, copy, copies
password, passcode, passphrase
log in, login, sign in
settings, preferences, options, configuration
install, set up, setup, installation
update, upgrade, patch
internet, online, web, network
website, site, web page, webpage
email, e-mail, mail, inbox
mobile, smartphone, cellphone, cell phone, mobile phone
screen, display, monitor
dark, darkness, dim, shade, shady, shadow, gloomy
hot, warm, heat, warmth
cold, cool, chilly, freezing, chill
wet, soggy, damp, moist, waterlogged, soaked, overwatering, overwater, overwatered, sodden
dry, arid
plant, vegetation, flora
leaf, foliage
soil, earth, dirt, compost, potting mix
animal, creature, pet, wildlife, fauna
dog, puppy, canine, hound
cat, kitten, feline
child, kid, infant, baby, toddler
teenager, teen, adolescent
adult, grown-up
elderly, aged, senior, older people, old age
speak, talk, converse, communicate, conversation, speaking, spoken
language, tongue
bilingual, multilingual, polyglot, second language, foreign language
learn, study, education, studying
teacher, tutor, instructor
student, pupil, learner
test, exam, examination, quiz, assessment
book, novel
author, writer
short, brief, concise
lengthy, long-winded
page, sheet
sleep, nap, slumber, asleep
exercise, workout, training, physical activity
obese, obesity, overweight
sugar, sweet, glucose, sugary
salt, salty, sodium
breathe, breath, breathing, respiration
infection, infected, infectious, contagious
vaccine, vaccination, vaccinate, immunise, immunize, immunisation, jab, inoculation
happy, glad, joyful, cheerful, happiness
sad, unhappy, sorrow, grief, sadness
angry, anger, rage, furious
fear, afraid, scared, frightened, fright
anxiety, anxious, worry, worried, nervous
stress, stressed, strain, tension
calm, relax, relaxed, relaxation
agitation, restless, restlessness, agitated, jittery, hyperactive, hyperactivity
clean, wash, rinse, cleanse
repair, fix, mend
build, construct, construction, erect
destroy, demolish, ruin, wreck, destruction
find, discover, detect, locate, spot
change, alter, modify, adjust, alteration, modification
keep, retain, preserve, maintain
store, save, saving, savings
lose, loss, misplace
steal, theft, stolen, thief, rob, robbery, burglary, burgle, burglar
enough, sufficient, adequate
lack, shortage, deficiency, insufficient, scarcity, deficit, too little, not enough, low on
often, frequently, regularly, commonly
daily, every day, each day
weekly, every week, each week
monthly, every month, each month
yearly, annual, annually, every year, each year
morning, dawn, sunrise
night, evening, dusk, nighttime, overnight
autumn, fall
rain, rainfall, precipitation, shower, showers
snow, snowfall
wind, breeze, gust, windy
storm, hurricane, cyclone, typhoon, tempest
sun, solar, sunlight, sunshine
moon, lunar
sea, ocean, marine, maritime, seawater
mountain, peak, summit
average, mean, typical
total, sum, overall
percent, percentage, proportion
double, twice, twofold
limit, cap, maximum, quota, threshold, ceiling
cancel, cancellation, revoke, abort
refund, reimburse, reimbursement, money back
deliver, delivery, dispatch, shipping, shipment
subscription, membership, plan
free, no charge, complimentary, free of charge
expensive, costly, pricey
cheap, inexpensive, affordable, low-cost
memory, ram
speed, velocity, pace
slow, sluggish, lag, latency
warning, alert, notification
goal, aim, objective, target
method, technique, approach, way
problem, issue, trouble, difficulty
result, outcome, consequence, effect
cause, reason, trigger, lead to
ease, easier, easy, easily, simpler
improve, improvement, better, enhance, boost
opportunity, prospect, chance
achievement, accomplishment, success, achieve, accomplish
specific, particular, concrete
device, appliance, gadget, equipment, machine
power, energy, electricity, electric
lamp, bulb, light bulb, lighting
mood, spirits, morale, feelings, emotional
weight, pounds, kilos, kilograms, body weight, weigh
heart, cardiovascular, coronary
diabetes, diabetic, blood sugar
risk, likelihood, odds, probability
lower, cut down, cut back, bring down
strengthen, stronger, reinforce, fortify, strong
walk, stroll, hike, walking, walker
jog, jogging, sprint, run
meal, breakfast, lunch, dinner, supper
moisture, humidity, damp, water content
door, doorway, entrance, gate
lock, bolt, latch, padlock, unlocked
alarm, siren
burglar, intruder, robber, break-in, burglary, housebreaking
empty, vacant, deserted, unoccupied
warm up, warming up, warm-up
flexibility, flexible, supple, limber
injury, injure, injured, wound, strain, sprain
muscle, muscular
bone, skeleton, fracture, skeletal
recover, recovery, heal, healing
grade, grades
class, lesson, lecture, course
healthy, health, wellbeing, well-being, fitness
liver, hepatic
alcohol, drinking, booze, alcoholic, ethanol, liquor
stem, stalk, stalks
trim, snip, prune, clip, cut
heat, heater, heating, radiator
wilt, droop, wither, shrivel
germ, microbe, pathogen, bug
immune, immunity, immune system
tears, crying, cry, weep, teary
eye, eyes, vision, sight
condensation, fog, mist, steam, misting
lens, lenses, glasses, spectacles, eyeglasses
soap, detergent, washing-up liquid, dish soap
engine, motor
headlight, headlamp, headlights, headlamps
faint, dim, feeble, dull
signal, reception, coverage
app, application, program, software
bright, brightness
drain, deplete, use up
bread, loaf
starch, carbohydrate, carbs
hard, firm, rigid, stiff
soft, tender
carbon dioxide, co2
oxygen, o2
photograph, photo, picture, image
film, movie
music, song, tune
garden, yard
kitchen, cooking
boss, manager, supervisor
salary, wage, wages, pay, income, earnings
rent, lease
flat, apartment
neighbour, neighbor
friend, companion, pal
wedding, marriage, married, marry
birth, born, newborn
school, classroom
university, college, campus
seller, vendor, supplier
price rise, inflation
profit, earnings
broken, cracked, damaged, damage
dirty, filthy, grimy
smell, odour, odor, scent, stink
noise, noisy, loud
quiet, silent, silence
city, metropolis, capital city
"""

FR_GROUPS = """
appeler, téléphoner, téléphone, appel, contacter, joindre
médecin, docteur, généraliste
vétérinaire, véto, clinique vétérinaire
immédiatement, tout de suite, aussitôt, sans attendre, sans délai, rapidement, vite, urgence
grand, gros, énorme, immense, vaste
commencer, débuter, début, démarrer, lancer
finir, terminer, achever, cesser, arrêter
acheter, achat, acquérir
prix, coût, tarif, frais
payer, paiement, régler, règlement
argent, monnaie, fonds, liquide, espèces, pièces
riche, fortuné, aisé
pauvre, pauvreté, démuni
emploi, travail, métier, poste, carrière, employeur, recrutement, recruteur, embauche
aider, aide, assistance, soutenir
choisir, choix, sélectionner, option
nécessaire, indispensable, essentiel, besoin
important, crucial, vital, essentiel, primordial
danger, dangereux, risque, risqué, nocif, nuisible, toxique
poison, empoisonnement, intoxication, toxique, toxicité
protéger, protection, préserver, défendre
éviter, empêcher, prévenir
malade, nausée, nauséeux, mal au cœur
vomir, vomissement, vomissements
maladie, affection, trouble, pathologie
symptôme, signe, indice
douleur, mal, douloureux
fatigue, fatigué, épuisé, épuisement, las, lassitude
vertige, vertiges, étourdi, étourdissement, tête qui tourne, malaise
soif, assoiffé
urine, uriner, pipi
boisson, liquide, boire, hydrater, hydratation
manger, avaler, ingérer, consommer
nourriture, alimentation, aliment, régime
médicament, remède, traitement, comprimé, cachet
soigner, traiter, guérir, soin, soins
hôpital, clinique, urgences
cœur, cardiaque, pouls
cerveau, mental, esprit
mémoire, mémoriser, souvenir, retenir
attention, concentration, concentrer
crème solaire, écran solaire
maillot de bain, maillot
serviette, se sécher
voyage, voyager, séjour, tourisme, étranger
vacances, congés
voiture, véhicule, automobile, auto
avion, appareil, vol
bateau, navire
maison, domicile, logement
ville, cité
pays, nation
gouvernement, état, pouvoir, régime, politique, autorités
loi, législation
roi, monarque, souverain, empereur
guerre, conflit, bataille, combat
armée, militaire, troupes, soldats
envahir, invasion, envahisseur, attaque, attaquer, piller, pillage, saccager, sac
tuer, assassiner, assassinat, meurtre
mort, mourir, décès, mortel, fatal
déclin, baisse, diminuer, diminution, réduire, chute, recul, affaiblir
hausse, augmenter, augmentation, croissance, croître, monter
économie, économique, finances, financier, fiscal, trésor, budget
impôt, impôts, taxe, taxes, fiscalité
dette, emprunt, prêt, emprunter
banque, bancaire
commerce, échanges, commercial, importation, exportation, droits de douane
magasin, boutique, commerce
client, acheteur, consommateur
entreprise, société, firme, compagnie
bourse, actions, marché boursier
krach, effondrement, s'effondrer, chute
panne, défaillance, tomber en panne, casser, cassé, défectueux
erreur, faute, par erreur, accidentel, accidentellement, par mégarde
supprimer, suppression, effacer, effacement
fichier, document
ordinateur, portable, pc
disque dur, disque, stockage, ssd
sauvegarde, sauvegarder, copie, copier
mot de passe, code secret
paramètres, réglages, préférences, configuration
installer, installation
mettre à jour, mise à jour
sombre, obscurité, ombre, pénombre
chaud, chaleur
froid, frais, fraîcheur
humide, détrempé, mouillé, trempé, arrosage excessif, trop arroser
sec, sèche, sécheresse
feuille, feuillage
terre, sol, terreau
animal, animaux, bête, compagnie
chien, chiot, canin
chat, chaton, félin
enfant, bébé, nourrisson, gamin
adolescent, ado, jeune
adulte, majeur
âgé, personnes âgées, senior, vieux
parler, discuter, converser, communiquer, conversation
langue, langage
bilingue, multilingue, polyglotte, langue étrangère
apprendre, étudier, études, apprentissage
professeur, enseignant, prof
élève, étudiant
examen, test, contrôle, épreuve
livre, roman, ouvrage
court, bref, concis
page, feuille
dormir, sommeil, sieste
sport, exercice, activité physique, entraînement
sucre, sucré, glucose
sel, salé, sodium
respirer, respiration, souffle
infection, infecté, contagieux
vaccin, vaccination, vacciner
heureux, joie, content
triste, tristesse, chagrin
peur, effrayé, crainte
anxiété, anxieux, inquiétude, inquiet, stress, stressé
calme, détente, se détendre
agitation, agité, nervosité, nerveux
nettoyer, laver, rincer
réparer, réparation
construire, construction, bâtir
détruire, destruction, ruiner
trouver, découvrir, détecter, repérer
changer, modifier, modification
garder, conserver, préserver
perdre, perte, égarer
voler, vol, volé, cambriolage, cambrioleur, voleur
assez, suffisant, suffisamment
manque, pénurie, carence, insuffisant, déficit, pas assez
souvent, fréquemment, régulièrement
quotidien, chaque jour, tous les jours
nuit, soir, soirée
pluie, pluvieux, précipitations, averse
soleil, solaire, ensoleillé
mer, océan, marin, maritime, eau de mer
moyenne, moyen
total, somme
pourcentage, pour cent, proportion
limite, plafond, maximum, quota, seuil
annuler, annulation
rembourser, remboursement
livrer, livraison, expédition, expédier
abonnement, forfait
gratuit, gratuitement, offert
cher, coûteux, onéreux
bon marché, pas cher, abordable
vitesse, rapidité
lent, lenteur
problème, souci, difficulté
cause, raison, provoquer, entraîner
améliorer, amélioration, meilleur
facile, facilement, simple
appareil, équipement, machine, électroménager
énergie, électricité, électrique, courant
lampe, ampoule, éclairage
humeur, moral, joyeux, gai
poids, kilos, kilogrammes, peser
cœur, cardiovasculaire, cardiaque
diabète, diabétique, glycémie
risque, probabilité, chance
renforcer, fort, fortifier
marcher, marche, promenade, randonnée
repas, petit-déjeuner, déjeuner, dîner
humidité, humide, eau
porte, entrée, portail
verrouiller, fermer à clé, serrure, cadenas, verrou
alarme, sirène
cambrioleur, intrus, voleur, effraction, cambriolage
vide, inoccupé, inhabité, désert
occupé, habité
muscle, musculaire
os, squelette, fracture
blessure, blessé, entorse
cours, leçon, classe
santé, sain, bien-être, forme
foie, hépatique
alcool, boisson alcoolisée, éthanol
tige, queue
couper, tailler, raccourcir
chaleur, radiateur, chauffage
faner, flétrir, se faner
microbe, germe, pathogène, bactérie
immunité, immunitaire, défenses
larmes, pleurer, pleurs
œil, yeux, vue, vision
buée, condensation, brouillard
verres, lunettes, lentilles
savon, détergent, liquide vaisselle
phare, phares
signal, réseau, couverture
application, appli, logiciel, programme
pain, miche, baguette
amidon, glucides
dur, rigide, ferme
mou, moelleux, tendre
dioxyde de carbone, co2, gaz carbonique
photo, photographie, image
film, cinéma
salaire, paie, revenu, rémunération
loyer, location
appartement, logement
ami, copain, camarade
mariage, marier, épouser
naissance, né, nouveau-né
école, scolaire
université, faculté, fac
odeur, parfum, senteur
bruit, bruyant, sonore
silence, silencieux, calme
"""

JA_GROUPS = """
電話, 連絡, 問い合わせ
医者, 医師, 病院
獣医, 動物病院
すぐ, 直ちに, ただちに, 至急, 急いで, 早急
危険, 危な, 有害, 毒, 中毒
吐, 嘔吐, 戻す
症状, サイン, 兆候, 徴候, 表れ, 現れ
疲れ, 疲労, だるさ, だる, 倦怠
めまい, 目まい, 眩暈, ふらつ, ふらっ, 立ちくらみ
渇き, 渇く, 喉が渇, のどが渇
尿, おしっこ
水分, 飲み物, 液体, 水を飲
故障, 壊れ, 壊れる, 不具合, 破損
盗難, 盗ま, 盗ん, 盗み, 窃盗, 泥棒
失う, 失わ, 失っ, 消失, 紛失, なくな, 無くな
削除, 消去, 消す, 消し
誤っ, 誤り, 誤, 間違, うっかり, 誤操作
経済, 財政, 金融, 貨幣, 財源, お金, 税
政治, 政府, 政権, 皇帝, 統治
侵入, 侵略, 略奪, 攻め, 攻撃, 襲撃, 征服
衰退, 没落, 弱体, 衰え, 崩壊
暗殺, 殺害, 殺さ
戦争, 紛争, 戦い, 戦闘
増加, 増え, 上昇, 上が, 高ま
減少, 減っ, 減る, 低下, 下が
価格, 値段, 料金, 費用, 代金
支払, 払う, 払い, 決済
無料, タダ
仕事, 職, 就職, 雇用, 求人, 採用
記憶, 覚え, 記憶力
集中, 注意, 注意力
旅行, 旅, 観光, 海外
日焼け止め, サンスクリーン
タオル, 拭
暗い, 暗がり, 日陰, 薄暗
水のやり過ぎ, 水やり過ぎ, 過湿, 湿っ, じめじめ, 水浸し
栄養, 肥料, 養分
保存, 保管, 貯め
コピー, 複製, 写し, バックアップ
パソコン, コンピューター, コンピュータ, PC
ハードディスク, ディスク, ドライブ, SSD
落ち着き, 興奮, 不安, そわそわ
二酸化炭素, CO2, 炭酸ガス
電力, 電気, エネルギー
照明, 電球, ライト, 明かり
家電, 機器, 電化製品, 装置
気分, 気持ち, 機嫌
体重, 重さ
心臓, 心血管, 循環器
糖尿病, 血糖
鍵, 施錠, ロック
侵入者, 泥棒, 空き巣
留守, 不在, 空き家
骨, 骨折
怪我, けが, ケガ, 負傷
肝臓, 肝
酒, アルコール, 飲酒
病原体, 細菌, ウイルス, 病原菌, 菌
免疫, 抵抗力
涙, 泣
曇, 結露
石けん, 石鹸, 洗剤
柔らか, 軟らか
給料, 給与, 収入, 賃金
学校, 授業
におい, 匂い, 臭い, 香り
"""


@lru_cache(maxsize=8)
def latin_index(
    text: str, stem: Callable[[str], str]
) -> tuple[dict[tuple[str, ...], frozenset[str]], frozenset[str]]:
    """Each member's stems (one to three words) -> the groups it is in, and the first stems of
    the phrases (so a text only looks at the windows a phrase can start). A group is named by
    its first member, prefixed with "~" so it never collides with a term."""
    index: dict[tuple[str, ...], set[str]] = {}
    for line in text.strip().splitlines():
        members = [m.strip() for m in line.split(",") if m.strip()]
        if len(members) < 2:
            continue
        group = "~" + members[0]
        for member in members:
            key = tuple(stem(word) for word in member.lower().replace("-", " ").split())
            index.setdefault(key, set()).add(group)
    starts = frozenset(key[0] for key in index if len(key) > 1)
    return {key: frozenset(groups) for key, groups in index.items()}, starts


@lru_cache(maxsize=1)
def japanese_index() -> tuple[tuple[str, str], ...]:
    """(member, group) pairs for the Japanese groups, longest member first."""
    pairs = []
    for line in JA_GROUPS.strip().splitlines():
        members = [m.strip() for m in line.split(",") if m.strip()]
        for member in members:
            pairs.append((member, "~" + members[0]))
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))
