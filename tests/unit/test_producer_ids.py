"""Producer id blocks: never handed out twice, even across restarts."""

from minibroker.storage.producer_ids import BLOCK_SIZE, ProducerIdAllocator


def test_blocks_do_not_overlap_across_restarts(tmp_path):
    first = ProducerIdAllocator(tmp_path).allocate_block()
    second = ProducerIdAllocator(tmp_path).allocate_block()
    third_allocator = ProducerIdAllocator(tmp_path)
    third = third_allocator.allocate_block()
    fourth = third_allocator.allocate_block()
    assert first == (0, BLOCK_SIZE)
    starts = [block[0] for block in (first, second, third, fourth)]
    assert starts == [0, BLOCK_SIZE, 2 * BLOCK_SIZE, 3 * BLOCK_SIZE]
    assert (tmp_path / "producer-id-block").read_text() == f"{4 * BLOCK_SIZE}\n"
