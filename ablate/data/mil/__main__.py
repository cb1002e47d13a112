"""`python -m ablate.data.mil SRC DST.npz`: pack any readable bag file as the shipped datasets are stored."""

import sys
from pathlib import Path

from ablate.data.mil.loaders import pack, read

if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[2].endswith(".npz"):
        sys.exit("usage: python -m ablate.data.mil SRC.{jld,h5,hdf5,csv,npz} DST.npz")
    src = Path(sys.argv[1])
    pack(read(src.stem.lower(), src), Path(sys.argv[2]))
