# SPDX-License-Identifier: MIT
# tests/store/tcpstore_record.py: record what PyTorch's own TCPStore client sends, through a
# proxy in front of PyTorch's own TCPStore server, and print it as C arrays. How the 1.x
# fixtures of test_tcpstore.c were made: /usr/bin/python3 tests/store/tcpstore_record.py
import datetime
import socket
import threading
import time

import torch
import torch.distributed as dist


def main():
    master = dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=10),
                           wait_for_workers=False)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    streams = []

    def pump(src, dst, buf):
        while True:
            d = src.recv(65536)
            if not d:
                break
            buf.append(d)
            dst.sendall(d)

    def accept():
        while True:
            c, _ = ls.accept()
            u = socket.create_connection(("127.0.0.1", master.port))
            up = []
            streams.append(up)
            threading.Thread(target=pump, args=(c, u, up), daemon=True).start()
            threading.Thread(target=pump, args=(u, c, []), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    cl = dist.TCPStore("127.0.0.1", ls.getsockname()[1], None, False,
                       datetime.timedelta(seconds=5))
    cl.set("key0", "value0")
    cl.get("key0")
    cl.add("cnt", 3)
    cl.wait(["key0", "cnt"])
    cl.compare_set("key0", "value0", "value1")
    cl.num_keys()
    cl.delete_key("key0")
    cl.set("bin", bytes([0, 1, 2, 255]))
    time.sleep(0.3)
    print("/* torch %s, %s */" % (torch.__version__, "TCPStore client, is_master=False"))
    for i, up in enumerate(streams):
        data = b"".join(up)
        print("static const uint8_t v1_stream%d[] = {" % i)
        for j in range(0, len(data), 12):
            print("\t" + " ".join("0x%02x," % b for b in data[j:j + 12]))
        print("};")


if __name__ == "__main__":
    main()
