"""What analysts do with finished land-cover maps: sampling designs and accuracy/area assessment (Olofsson et
al. 2014), mosaics of several scenes' maps, and the lineage of a map back to its scenes."""
