"""train_tpu.py on a folder of photos, one sub-folder per class (the layout of tf_flowers and of
most downloads: PHOTOS/daisy/1.jpg, PHOTOS/tulips/2.png, ...).

    python examples/image_folder.py --images PHOTOS --smoke   # and train_tpu.py's options

Each file is decoded by its content (JPEG, PNG, GIF or BMP, whatever its name says), fitted into
one static SIZE x SIZE shape without stretching (padded with black), and written once as uint8
TFRecords. A file that cannot be decoded (cut short, say) is left out and named in the data
folder's info.json. On Kaggle, write the TFRecords under /kaggle/working (--data-dir), not into
the read-only /kaggle/input; on a Cloud TPU VM, to a gs:// bucket.
"""

import argparse
import os
import random

import tensorflow as tf

import train_tpu


class ImageFolder:
    """The data part for a folder of photos (see train_tpu.FashionMNIST)."""

    DTYPE = "uint8"

    def __init__(self, folder, size):
        self.folder = folder
        self.CLASSES = sorted(d.name for d in os.scandir(folder) if d.is_dir())
        self.NAME = f"{os.path.basename(os.path.abspath(folder))}_{size}px"
        self.SHAPE = (size, size, 3)  # 128 or 224 on a TPU: multiples of 8 cost no padding

    def examples(self):
        """(name, split, item) of every file: a tenth to validate, a tenth to test, chosen by
        the file's name, so adding photos moves none of the others."""
        files = [
            (f"{name}/{entry.name}", label)
            for label, name in enumerate(self.CLASSES)
            for entry in sorted(os.scandir(f"{self.folder}/{name}"), key=lambda e: e.name)
        ]
        random.Random(0).shuffle(files)  # classes mixed: --train-examples takes the first written
        for path, label in files:
            yield path, train_tpu.split_of(path, validation=0.1, test=0.1), (path, label)

    def read(self, item):
        """The photo as SIZE x SIZE x 3 uint8 pixels; a file that is no image raises."""
        path, label = item
        data = tf.io.read_file(f"{self.folder}/{path}")
        image = tf.io.decode_image(data, channels=3, expand_animations=False)  # by content
        image = tf.image.resize_with_pad(image, *self.SHAPE[:2])  # the whole photo, not stretched
        return tf.cast(tf.round(image), tf.uint8).numpy(), label


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--images", required=True, help="a folder with a sub-folder per class")
    parser.add_argument("--size", type=int, default=128, help="pixels a side")
    known, rest = parser.parse_known_args()
    train_tpu.run_as_program(rest, data=ImageFolder(known.images, known.size))
