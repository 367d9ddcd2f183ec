#!/usr/bin/env python3
"""Independent reference of dc_dataset_shuffled_order, written from its documentation
(include/deltacells.h, src/dataset/order.rs): prints the order for the given tile sizes.

    python3 tests/shuffled_order.py SEED WINDOW_TILES CELLS_OF_TILE_0 CELLS_OF_TILE_1 ...

Used by tests/dataset_batches.rs to check that the Rust implementation follows the
specification bit for bit.
"""
import sys

M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, m):
        threshold = ((1 << 64) - m) % m
        while True:
            p = self.next() * m
            if (p & M64) >= threshold:
                return p >> 64

    def shuffle(self, a):
        for i in range(len(a) - 1, 0, -1):
            j = self.below(i + 1)
            a[i], a[j] = a[j], a[i]


def shuffled_order(seed, window, tile_cells):
    window = max(window, 1)
    starts = [0]
    for c in tile_cells:
        starts.append(starts[-1] + c)
    rng = SplitMix64(seed)
    tiles = list(range(len(tile_cells)))
    rng.shuffle(tiles)
    out = []
    for w in range(0, len(tiles), window):
        cells = []
        for t in tiles[w:w + window]:
            cells.extend(range(starts[t], starts[t + 1]))
        rng.shuffle(cells)
        out.extend(cells)
    return out


def main():
    seed, window = int(sys.argv[1]), int(sys.argv[2])
    tile_cells = [int(x) for x in sys.argv[3:]]
    print(" ".join(str(c) for c in shuffled_order(seed, window, tile_cells)))


if __name__ == "__main__":
    main()
