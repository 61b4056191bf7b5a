"""train_tpu.py on texts: which of five languages a fortune cookie is in.

    python examples/text_fortunes.py --smoke     # train_tpu.py's options, on texts

Debian packages the texts (the fortune program's data, 9 MB): apt-get install fortunes
fortunes-de fortunes-es fortunes-it fortunes-br. Text on a TPU: words become int32 ids on the
host, when the TFRecords are written (a TPU takes no strings), every text the same LENGTH (one
static shape), id 0 the padding that the model masks out.
"""

import collections
import glob
import os
import random
import re

import numpy as np

import train_tpu
from train_tpu import keras

FOLDER = "/usr/share/games/fortunes"
LANGUAGES = {  # language: Debian's package and its files under FOLDER
    "English": ("fortunes", "*"),  # the files at the top, but "brasil"
    "German": ("fortunes-de", "de/*"),
    "Spanish": ("fortunes-es", "es/*.fortunes"),  # es/off/, its offensive ones, left out
    "Italian": ("fortunes-it", "it/*"),
    "Portuguese": ("fortunes-br", "brasil"),
}
NOT_PROSE = {"ascii-art", "asciiart", "banner", "translate-me", "translations", "brasil"}
VOCABULARY = 8192  # ids: 0 padding, 1 a word not among the training texts' 8,190 commonest
LENGTH = 72  # words per text, a multiple of 8 that covers 95% of them: longer ones are cut


def words(text):
    return re.findall(r"\w+", text.lower())  # letters and digits, accents included


class Fortunes:
    """The data part for texts (see train_tpu.FashionMNIST): examples, their split, read()."""

    NAME = "fortunes"
    CLASSES = list(LANGUAGES)
    SHAPE, DTYPE = (LENGTH,), "int32"  # word ids, 0 = padding

    def texts(self):
        """{text: language} of every fortune found under one language only."""
        found = collections.defaultdict(set)
        for language, (package, pattern) in LANGUAGES.items():
            paths = [
                p
                for p in sorted(glob.glob(f"{FOLDER}/{pattern}"))
                if os.path.isfile(p)
                and not os.path.islink(p)
                and not p.endswith((".dat", ".u8"))
                and (pattern == "brasil" or os.path.basename(p) not in NOT_PROSE)
            ]
            if not paths:
                raise train_tpu.UsageError(
                    f"No {language} fortunes in {FOLDER}/{pattern}: apt-get install {package}."
                )
            for path in paths:
                with open(path, encoding="utf-8", errors="replace") as f:
                    for text in re.split(r"^%\s*$", f.read(), flags=re.M):  # "%" ends one
                        if words(text):  # a text of no word would be all padding
                            found[text.strip()].add(language)
        return {text: languages.pop() for text, languages in found.items() if len(languages) == 1}

    def examples(self):
        """(name, split, item): a fifth of the texts to test, a tenth to validate. The
        vocabulary is counted on the training texts only, as a model in use meets new words."""
        texts = self.texts()
        split = {text: train_tpu.split_of(text, test=0.2) for text in texts}
        counts = collections.Counter(w for t in texts if split[t] == "train" for w in words(t))
        self.vocabulary = {w: i + 2 for i, (w, _) in enumerate(counts.most_common(VOCABULARY - 2))}
        order = list(texts)  # found language by language: mixed, the same every run,
        random.Random(0).shuffle(order)  # since --train-examples takes the first written
        for text in order:
            yield text[:40], split[text], (text, self.CLASSES.index(texts[text]))

    def read(self, item):
        """One text's word ids, cut at LENGTH and padded with 0s, and its label."""
        text, label = item
        ids = [self.vocabulary.get(word, 1) for word in words(text)[:LENGTH]]
        return np.array(ids + [0] * (LENGTH - len(ids)), np.int32), label


def build_bag_of_words(shape, classes, bf16=False, seed=0, uint8=False):
    """Word ids -> embeddings -> their average over the words (mask_zero leaves the padding out)
    -> a hidden layer -> logits: enough to tell languages apart. bf16: mixed_bfloat16 per layer,
    as in the CNN; the embedding table stays float32 (the policy's variables), 128 wide."""
    policy = "mixed_bfloat16" if bf16 else "float32"
    embed = keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)
    ids = keras.Input(shape, dtype="int32", name="ids")
    x = keras.layers.Embedding(
        VOCABULARY, 128, mask_zero=True, embeddings_initializer=embed, dtype=policy
    )(ids)
    x = keras.layers.GlobalAveragePooling1D(dtype=policy)(x)  # over the words, not the padding
    init = [keras.initializers.GlorotUniform(seed + i) for i in (1, 2)]
    x = keras.layers.Dense(128, activation="relu", kernel_initializer=init[0], dtype=policy)(x)
    logits = keras.layers.Dense(classes, kernel_initializer=init[1], dtype="float32")(x)
    return keras.Model(ids, logits, name="bag_of_words")


if __name__ == "__main__":
    train_tpu.run_as_program(data=Fortunes(), make_model=build_bag_of_words)
